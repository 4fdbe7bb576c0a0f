//! The hot-index and lease contracts against the in-process backends of `chime dev`.

use chime_storage::testkit as support;

use chime_storage::storage_contract;

storage_contract!(hot_index, support::memory());
storage_contract!(leases, support::memory());
storage_contract!(membership, support::memory());
storage_contract!(run_leases, support::memory());
