#!/usr/bin/env bash
# run.sh runs the black-box suite against a docker compose cluster. The suite
# builds the binaries and images itself through deploy/up.sh and removes its
# cluster afterwards (t.Cleanup; a run killed before that is reaped by the
# next one). Extra arguments go to go test, e.g. ./e2e/run.sh -run 'TestCluster/(baseline|kill)$'.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! docker info >/dev/null 2>&1; then
	echo "e2e: skipped, no Docker daemon answers" >&2
	exit 0
fi
exec go test -tags e2e -count=1 -timeout 40m -v ./e2e/ "$@"
