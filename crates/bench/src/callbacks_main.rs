//! `chime-bench-callbacks`: one client of `chime-bench pipeline --scenarios callback-floor`.

// The executor's allocator, so the client costs what an executor's callbacks cost.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // As an executor runs (chime_runtime::memory), so the floor's client costs what it does.
    chime_runtime::memory::without_huge_pages();
    chime_bench::callbacks::run(chime_bench::callbacks::ClientArgs::parse()).await
}
