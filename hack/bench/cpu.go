package main

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// cpuSnapshot is the CPU time (user + system) each process has used so far,
// by component name.
type cpuSnapshot map[string]time.Duration

// cpuTimes reads the CPU time of the control plane's components, configstamp
// and the benchmark itself.
func (e *env) cpuTimes() cpuSnapshot {
	pids := e.cp.Pids()
	pids["configstamp"] = e.configstamp.pid()
	pids["benchmark client"] = os.Getpid()
	out := cpuSnapshot{}
	for name, pid := range pids {
		if d, err := processCPU(pid); err == nil {
			out[name] = d
		}
	}
	return out
}

func processCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: count fields
	// after the last ')'. utime and stime are fields 14 and 15 of the line.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// addCPU adds, for a scenario's window, the CPU seconds each process used,
// largest first, against what the machine's cores could give in that time.
func (r *results) addCPU(scenario, window string, before, after cpuSnapshot, elapsed time.Duration) {
	type use struct {
		name string
		d    time.Duration
	}
	var uses []use
	var total time.Duration
	for name, a := range after {
		d := a - before[name]
		total += d
		uses = append(uses, use{name, d})
	}
	slices.SortFunc(uses, func(a, b use) int { return cmp.Compare(b.d, a.d) })
	parts := make([]string, 0, len(uses))
	for _, u := range uses {
		if u.d > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f s", u.name, u.d.Seconds()))
		}
	}
	capacity := time.Duration(runtime.NumCPU()) * elapsed
	r.add(scenario, "CPU time by process, "+window,
		fmt.Sprintf("%s; all %.2f s of the %.2f s that %d cores give in %s (%.0f%%)", strings.Join(parts, ", "),
			total.Seconds(), capacity.Seconds(), runtime.NumCPU(), fmtDuration(elapsed), 100*total.Seconds()/capacity.Seconds()))
}
