#!/usr/bin/env bash
# Builds Argo Rollouts' controller (rollouts-controller) of one release from its
# Go module, through the Go module proxy, as the control plane is built: with
# the module's own go.mod (its replace directives included), in a writable copy
# of the module, outside configstamp's module. test/argo runs it.
#
#   hack/argo-rollouts.sh v1.8.3 bin/argo-rollouts-controller-v1.8.3
set -euo pipefail
version=$1
out=$(realpath -m "$2")
module=github.com/argoproj/argo-rollouts
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
"$(dirname "$0")/module-copy.sh" "$module@$version" "$tmp/src"
echo "building the rollouts-controller of $module@$version (a few minutes on 2 cores the first time)" >&2
mkdir -p "$(dirname "$out")"
cd "$tmp/src"
GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out" ./cmd/rollouts-controller
