//go:build tools

// Package tools records the main packages built from this module so that
// `go mod tidy` keeps their dependencies. It is never compiled.
package tools

import (
	_ "github.com/kedacore/keda/v2/cmd/adapter"
	_ "github.com/kedacore/keda/v2/cmd/operator"
)
