//! `faultline agent`: one share of a distributed run, exactly as `loadgen agent` runs it (the same library
//! function), so that `faultline run --agents N` can start its local agents from its own executable.

/// Runs one agent to its end: 0 once the runner has its recording, 2 for a plan it cannot run, 3 otherwise.
pub fn agent(options: loadgen::agent::AgentOptions) -> i32 {
    // One thread, as loadgen's default: an agent's share is one core's work.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("faultline agent: error: cannot start the runtime: {e}");
            return 3;
        }
    };
    match runtime.block_on(loadgen::agent::run(options)) {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("faultline agent: error: {e}");
            i32::from(e.exit_code())
        }
    }
}
