//! `ud_pingpong`: the libibverbs `ibv_ud_pingpong` example over the
//! software RoCE v2 stack, with the same flags, exchange and output.
//!
//! Server: `cargo run --example ud_pingpong -- --bind 127.0.0.1`
//! Client: `cargo run --example ud_pingpong -- --bind 127.0.0.2 127.0.0.1`

fn main() -> std::process::ExitCode {
    softroce::pingpong::main(softroce::pingpong::Kind::Ud)
}
