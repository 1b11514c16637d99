#!/usr/bin/env bash
# make's real-node lane runs this before its tests (the Makefile's
# test-realnode): can this host run the real node (test/localcp
# Options.RealNode)? It runs `go run ./hack/localcp preflight` (root, the
# host's cgroup mode and what the kubelet needs of it, the host's programs,
# the pause image) and prints what it says.
#
#   hack/realnode-preflight.sh LOG
#
# Exit 0: the host can; run the lane.
# Exit 10: it cannot, for a known reason (e.g. cgroup v2 inside a container
#   whose cgroup namespace root holds processes), and
#   CONFIGSTAMP_REALNODE_UNSUPPORTED=skip opts out: the lane is recorded as
#   SKIPPED with that reason in LOG (LOG.rc says "skipped"), which make test's
#   summary prints, and on GitHub Actions the reason is a warning annotation.
# Any other exit: the lane fails with the reason (LOG, LOG.rc; on GitHub
#   Actions an error annotation). Without the opt-out a host that cannot run
#   the real node never passes silently.
set -uo pipefail

log=${1:?usage: $0 LOG}
mkdir -p "$(dirname "$log")"
rm -f "$log.rc"

# GitHub's workflow commands take one line; % and newlines are escaped.
annotate() { # LEVEL TITLE MESSAGE
	[ "${GITHUB_ACTIONS:-}" = true ] || return 0
	local m=${3//'%'/%25}
	m=${m//$'\n'/%0A}
	echo "::$1 title=$2::$m"
}

out=$(${GO:-go} run ./hack/localcp preflight 2>&1)
rc=$?
printf '%s\n' "$out" | sed 's/^/[real-node] preflight: /'
reason=$(printf '%s\n' "$out" | grep -v '^host: ' | sed 's/^localcp: //')
case $rc in
0)
	annotate notice "real node" "$out"
	exit 0
	;;
3)
	if [ "${CONFIGSTAMP_REALNODE_UNSUPPORTED:-}" = skip ]; then
		msg="SKIPPED (CONFIGSTAMP_REALNODE_UNSUPPORTED=skip): $reason"
		echo "[real-node] $msg"
		printf '%s\n' "$msg" >"$log"
		echo skipped >"$log.rc"
		annotate warning "real-node lane skipped" "$reason"
		exit 10
	fi
	msg="FAILED: $reason (CONFIGSTAMP_REALNODE_UNSUPPORTED=skip skips the lane, saying so)"
	;;
*)
	msg="FAILED: the real node's preflight: $reason"
	;;
esac
echo "[real-node] $msg"
printf '%s\n' "$msg" >"$log"
echo "$rc" >"$log.rc"
annotate error "real-node lane" "$msg"
exit "$rc"
