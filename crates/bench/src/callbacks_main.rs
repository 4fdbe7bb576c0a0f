//! `chime-bench-callbacks`: one client of `chime-bench pipeline --scenarios callback-floor`.

// The executor's allocator, so the client costs what an executor's callbacks cost.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    chime_bench::callbacks::run(chime_bench::callbacks::ClientArgs::parse()).await
}
