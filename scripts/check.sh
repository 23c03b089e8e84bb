#!/usr/bin/env bash
# The quick checks CI runs before the tests: formatting and lints.
# Run it before committing: scripts/check.sh && git commit ...
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
