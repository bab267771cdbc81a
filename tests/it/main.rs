//! The black-box suites, in one test binary (one link instead of one per suite). Each module
//! starts its own `redis-server`, gateways and workers through the harness in `src/`, and talks
//! to them over real sockets only. Run one suite with `cargo test --test it <module>::`.

mod auth;
mod chaos;
mod cli;
mod cluster;
mod console;
mod console_browser;
mod console_edge;
mod credentials_admin;
mod docs;
mod durability;
mod example_worker;
mod fairness;
mod graceful;
mod http_surface;
mod idempotency;
mod inline;
mod interop;
mod lifecycle;
mod limits;
mod listen;
mod loadtest;
mod observability;
mod offerings;
mod partition;
mod pipeline;
mod polling;
mod pools;
mod pools_routing;
mod record_size;
mod recovery;
mod redis_tls;
mod related;
mod run_local;
mod sentinel;
mod shared_secrets;
mod single_slot;
mod snapshot_cache;
mod state_machine;
mod steps;
mod tenant_identity;
mod upstream;
mod upstream_hostile;
mod upstream_oauth_fixture;
mod upstream_servers;
