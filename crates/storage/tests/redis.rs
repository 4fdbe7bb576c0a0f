//! The hot-index and lease contracts against a real Redis.

mod support;

use chime_storage::storage_contract;

storage_contract!(hot_index, support::redis());
storage_contract!(leases, support::redis());
