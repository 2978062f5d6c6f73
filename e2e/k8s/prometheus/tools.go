//go:build tools

// Package tools records the main packages built from this module so that
// `go mod tidy` keeps their dependencies. It is never compiled.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
