#!/usr/bin/env bash
# make test runs its go test step in two lanes at once (see the Makefile's
# test target); this runs one lane's command and sums the lanes up.
#
#   hack/test-lanes.sh run NAME LOG CMD...   runs CMD, its output in LOG and on
#                                            stdout, each line there prefixed
#                                            [NAME]; exits with CMD's status,
#                                            also written to LOG.rc
#   hack/test-lanes.sh summary LOG...        each LOG's outcome and package
#                                            results (ok, FAIL, --- FAIL, panic);
#                                            a lane skipped by
#                                            hack/realnode-preflight.sh (LOG.rc
#                                            "skipped") prints its reason
set -uo pipefail

case "${1:-}" in
run)
	[ $# -ge 4 ] || { echo "usage: $0 run NAME LOG CMD..." >&2; exit 2; }
	name=$2 log=$3
	shift 3
	mkdir -p "$(dirname "$log")"
	rm -f "$log.rc"
	echo "[$name] $*"
	"$@" 2>&1 | tee "$log" | sed -u "s/^/[$name] /"
	rc=${PIPESTATUS[0]}
	echo "$rc" >"$log.rc"
	exit "$rc"
	;;
summary)
	shift
	echo "==> go test lanes"
	for log in "$@"; do
		name=$(basename "$log" .log)
		if [ ! -f "$log.rc" ]; then
			echo "--- $name: did not run (a target it needs failed)"
			continue
		fi
		rc=$(cat "$log.rc")
		if [ "$rc" = skipped ]; then # hack/realnode-preflight.sh, opted out
			echo "--- $name: $(cat "$log")"
			continue
		fi
		outcome=ok
		[ "$rc" = 0 ] || outcome="FAIL (exit $rc)"
		echo "--- $name: $outcome; output in $log"
		grep -E '^(ok|FAIL|--- FAIL|panic:)' "$log" | sed 's/^/    /'
	done
	;;
*)
	echo "usage: $0 run NAME LOG CMD... | summary LOG..." >&2
	exit 2
	;;
esac
