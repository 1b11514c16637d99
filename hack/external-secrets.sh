#!/usr/bin/env bash
# Builds the External Secrets Operator's controller of one release from its Go
# module, through the Go module proxy, as hack/argo-rollouts.sh builds Argo's:
# with the module's own go.mod, in a writable copy, outside configstamp's
# module. Only its fake provider and fake generator are registered: the other
# thirty-odd (cloud SDKs) are left out of the build, which they would make
# several times longer; the controllers are the release's own code.
# test/eso runs it.
#
#   hack/external-secrets.sh v0.16.2 bin/external-secrets-v0.16.2
set -euo pipefail
version=$1
out=$(realpath -m "$2")
module=github.com/external-secrets/external-secrets
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
"$(dirname "$0")/module-copy.sh" "$module@$version" "$tmp/src"
for kind in provider generator; do
	cat >"$tmp/src/pkg/$kind/register/register.go" <<GO
// Package register registers the fake $kind only (hack/external-secrets.sh).
package register

import _ "$module/pkg/$kind/fake"
GO
done
echo "building the controller of $module@$version, fake provider only (a few minutes on 2 cores the first time)" >&2
mkdir -p "$(dirname "$out")"
cd "$tmp/src"
GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out" .
