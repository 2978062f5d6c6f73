//! `hcomm-agent diagnose`: the checklist operators otherwise run by hand. [`collect`]
//! gathers facts (with [`cluster`] reading the member's Pod, group and rank table when
//! asked), [`checks`] turns them into findings (pure), [`table`] prints them.

pub mod allocation;
pub mod checks;
pub mod cluster;
pub mod collect;
pub mod facts;
pub mod logs;
pub mod table;

pub use checks::{Finding, Outcome};
pub use collect::DiagnoseArgs;

/// Runs the checklist; returns the findings and the rendered report.
pub async fn run(args: &DiagnoseArgs) -> (Vec<Finding>, String) {
    let facts = collect::collect(args).await;
    let rows = checks::run_all(&facts);
    let text = if args.tsv {
        table::render_tsv(&rows)
    } else {
        table::render(&rows, &facts.log_matches)
    };
    (rows, text)
}
