#!/usr/bin/env bash
# compose.sh runs Compose on this cluster's file and project, with node4's
# profile active: ./deploy/compose.sh ps, ./deploy/compose.sh logs -f node1.
# The e2e suite uses it too, so that it finds containers the same way.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
compose "$@"
