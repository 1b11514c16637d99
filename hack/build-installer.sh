#!/usr/bin/env bash
# Renders one config/ overlay into a single manifest with the manager image set
# to IMG: what `make build-installer` writes to dist/install.yaml and what
# `make deploy` / `make undeploy` apply and delete. test/manifests runs this
# script too, so the tested render is the shipped one.
#
#   hack/build-installer.sh IMG [OVERLAY [OUTPUT]]
#
# IMG: registry/name[:tag] or registry/name@sha256:...; OVERLAY: a directory
# under config/ (default config/default); OUTPUT: a file, or - for stdout.
# The release workflow passes the digest it pushed
# (ghcr.io/configstamp/configstamp@sha256:...), so a release's install*.yaml
# run exactly the image it signed.
#
# INSTALL_VERSION (environment; the release sets it to the tag, `make
# release-installers`): when set, every object gets the label
# app.kubernetes.io/version=INSTALL_VERSION (metadata only: selectors and pod
# templates stay as they are). An image pinned by digest names no version;
# this label is where `kubectl configstamp version` reads the server's.
#
# kubectl has kustomize built in but not `kustomize edit set image`, so the
# image is set by an `images:` entry in a generated overlay that references
# a copy of config/ (nothing in the repository is modified).
set -euo pipefail

img=${1:?usage: $0 IMG [OVERLAY [OUTPUT]]}
overlay=${2:-config/default}
out=${3:--}
kubectl=${KUBECTL:-kubectl}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

overlay=${overlay%/}
case $overlay in
  config/*) ;;
  *) echo "$0: OVERLAY must be a directory under config/, got $overlay" >&2; exit 2 ;;
esac
version=${INSTALL_VERSION:-}
# A label value: at most 63 characters, alphanumerics, '-', '_' and '.', an
# alphanumeric at each end.
if [[ -n $version && ! $version =~ ^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$ ]]; then
  echo "$0: INSTALL_VERSION=$version is not a valid label value" >&2
  exit 2
fi
if [[ ! -f $root/$overlay/kustomization.yaml ]]; then
  echo "$0: $overlay/kustomization.yaml not found" >&2
  exit 2
fi

# registry/name[:tag][@digest]; a colon before the last slash is a port.
name=$img tag="" digest=""
if [[ $name == *@* ]]; then
  digest=${name#*@}
  name=${name%%@*}
fi
last=${name##*/}
if [[ $last == *:* ]]; then
  tag=${last##*:}
  name=${name%:*}
fi
if [[ -z $tag && -z $digest ]]; then
  # docker's default tag, said explicitly (else the base's tag would stay).
  tag=latest
  img=$name:latest
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -R "$root/config" "$tmp/config"
mkdir "$tmp/release"

# The image name config/manager/kustomization.yaml gives the manager
# (ghcr.io/configstamp/configstamp): what the images entry below replaces.
base=$("$kubectl" kustomize "$root/config/manager" | awk '$1 == "image:" { print $2; exit }')
base=${base%@*}
if [[ ${base##*/} == *:* ]]; then base=${base%:*}; fi
if [[ -z $base ]]; then
  echo "$0: config/manager renders no image" >&2
  exit 1
fi

{
  echo "resources:"
  echo "  - ../$overlay"
  echo "images:"
  echo "  - name: \"$base\""
  echo "    newName: \"$name\""
  if [[ -n $tag ]]; then echo "    newTag: \"$tag\""; fi
  if [[ -n $digest ]]; then echo "    digest: \"$digest\""; fi
  if [[ -n $version ]]; then
    echo "labels:"
    echo "  - pairs:"
    echo "      app.kubernetes.io/version: \"$version\""
    echo "    includeSelectors: false"
    echo "    includeTemplates: false"
  fi
} >"$tmp/release/kustomization.yaml"

"$kubectl" kustomize "$tmp/release" >"$tmp/install.yaml"

# The images entry matches by name: if config/manager ever names the image
# differently, fail here rather than ship the default image.
if ! grep -qE "^ +image: \"?${img//./\\.}\"?$" "$tmp/install.yaml"; then
  echo "$0: the rendered manager image is not $img:" >&2
  grep -E '^ +image:' "$tmp/install.yaml" >&2 || true
  exit 1
fi

if [[ $out == - ]]; then
  cat "$tmp/install.yaml"
else
  mkdir -p "$(dirname "$out")"
  mv "$tmp/install.yaml" "$out"
fi
