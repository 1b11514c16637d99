#!/usr/bin/env bash
# make test runs its go test step in two lanes at once (see the Makefile's
# test target); this runs one lane's command and sums the lanes up.
#
#   hack/test-lanes.sh run NAME LOG CMD...   runs CMD, its output in LOG and on
#                                            stdout, each line there prefixed
#                                            [NAME]; exits with CMD's status,
#                                            also written to LOG.rc, and its
#                                            seconds to LOG.time
#   hack/test-lanes.sh summary LOG...        each LOG's outcome, time and
#                                            package results (ok, FAIL,
#                                            --- FAIL, panic); a failed log
#                                            without go test's failure lines
#                                            (a make step): its last lines;
#                                            a lane skipped by
#                                            hack/realnode-preflight.sh (LOG.rc
#                                            "skipped") prints its reason
set -uo pipefail

# failures LOG: LOG's --- FAIL lines, each with the last two file.go:N:
# lines printed under it (go test prints a failed test's t.Error and t.Log
# lines after its --- FAIL line, in order: a failure's message is mostly
# last), cut to 240 characters; a panic and its first lines; the FAIL
# lines of packages.
failures() {
	awk '
		function flush() { if (n > 1) print b[n-1]; if (n > 0) print b[n]; n = 0 }
		/^[[:space:]]*--- FAIL/ { flush(); print; under = 1; next }
		/^[[:space:]]*--- (PASS|SKIP)/ { flush(); under = 0; next }
		/^panic:/ { flush(); print; p = 8; next }
		p > 0 { print; p--; next }
		/^FAIL[[:space:]]/ { flush(); print; under = 0; next }
		under && /^[[:space:]]+[[:alnum:]_]+\.go:[0-9]+:/ { b[++n] = substr($0, 1, 240) }
		END { flush() }
	' "$1"
}

case "${1:-}" in
run)
	[ $# -ge 4 ] || { echo "usage: $0 run NAME LOG CMD..." >&2; exit 2; }
	name=$2 log=$3
	shift 3
	mkdir -p "$(dirname "$log")"
	rm -f "$log.rc" "$log.time"
	echo "[$name] $*"
	start=$SECONDS
	"$@" 2>&1 | tee "$log" | sed -u "s/^/[$name] /"
	rc=${PIPESTATUS[0]}
	echo "$((SECONDS - start))" >"$log.time"
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
		[ -f "$log.time" ] && outcome="$outcome in $(cat "$log.time") s"
		echo "--- $name: $outcome; output in $log"
		grep -E '^(ok|FAIL|--- FAIL|panic:)' "$log" | sed 's/^/    /'
	done
	# Last, where a CI page that keeps only the output's tail shows it:
	# every failed test, at every level, with the lines its failure
	# printed (go test prints a failed test's t.Error and t.Log lines
	# after its --- FAIL line, indented).
	for log in "$@"; do
		[ -f "$log.rc" ] && [ "$(cat "$log.rc")" != 0 ] && [ "$(cat "$log.rc")" != skipped ] || continue
		echo "==> $(basename "$log" .log): what failed"
		what=$(failures "$log")
		[ -n "$what" ] || what=$(tail -n 20 "$log")
		printf '%s\n' "$what" | tail -n "${SUMMARY_FAILURE_LINES:-40}"
	done
	;;
*)
	echo "usage: $0 run NAME LOG CMD... | summary LOG..." >&2
	exit 2
	;;
esac
