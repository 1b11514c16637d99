#!/usr/bin/env bash
# Copies a Go module of the module proxy (MODULE@VERSION) into DEST,
# writable, outside configstamp's module: hack/argo-rollouts.sh and
# hack/external-secrets.sh build other projects' controllers from it.
#
#   hack/module-copy.sh github.com/argoproj/argo-rollouts@v1.8.3 /tmp/x/src
set -euo pipefail
module=$1
dest=$2
dir=$(cd "$(dirname "$dest")" && GOWORK=off GOFLAGS= go mod download -json "$module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$dir" ] || { echo "go mod download $module gave no directory" >&2; exit 1; }
cp -r "$dir" "$dest"
chmod -R u+w "$dest"
