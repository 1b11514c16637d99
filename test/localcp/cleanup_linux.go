//go:build linux

package localcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// realNodeLockPath is flocked by the one real node of the machine.
	realNodeLockPath = "/run/configstamp-realnode.lock"
	// realNodeStatePath records the running (or crashed) real node.
	realNodeStatePath = "/run/configstamp-realnode.json"
	// lockWaitStop bounds how long Stop/StopDir wait for the lock.
	lockWaitStop = 2 * time.Minute
)

// kubeletSysctls are the kernel tunables the kubelet sets on start
// (pkg/kubelet/cm setupKernelTunables, protectKernelDefaults false).
var kubeletSysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// nodeRecord is realNodeStatePath's content.
type nodeRecord struct {
	Dir string `json:"dir"`
	// OwnsDir: Dir is a temporary directory of Start's, removed with the node.
	OwnsDir bool `json:"ownsDir,omitempty"`
	// Sysctls are kubeletSysctls' values before the kubelet started.
	Sysctls map[string]string `json:"sysctls,omitempty"`
}

func readNodeRecord() (nodeRecord, error) {
	var r nodeRecord
	data, err := os.ReadFile(realNodeStatePath)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nodeRecord{}, fmt.Errorf("reading %s: %w", realNodeStatePath, err)
	}
	return r, nil
}

func writeNodeRecord(r nodeRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.WriteFile(realNodeStatePath+".tmp", data, 0o600); err != nil {
		return err
	}
	return os.Rename(realNodeStatePath+".tmp", realNodeStatePath)
}

// lockRealNode waits (within ctx) for the machine's real-node lock.
func lockRealNode(ctx context.Context, logf func(string, ...any)) (*os.File, error) {
	f, err := os.OpenFile(realNodeLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the real-node lock: %w", err)
	}
	began := time.Now()
	logged := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			if logged {
				logf("got the real-node lock after %s", time.Since(began).Round(time.Millisecond))
			}
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", realNodeLockPath, err)
		}
		if !logged {
			logf("another real node runs on this machine; waiting for %s", realNodeLockPath)
			logged = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the real-node lock %s (another real node runs): %w", realNodeLockPath, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stopListed stops the components listed in dir/pids, without the node cleanup.
func stopListed(dir string) error {
	procs, _, err := attachProcs(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	c := &ControlPlane{Dir: dir, procs: procs, logf: func(string, ...any) {}}
	return c.stopProcs(stopGrace)
}

// drainRealNode stops kube-proxy and the kubelet, then kills and deletes
// every container task while containerd still runs (their shims then exit).
// Errors are logged only: cleanupRealNode kills whatever is left.
func (c *ControlPlane) drainRealNode() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		if (p.name != kubeProxyBin && p.name != kubeletBin) || p.exited() {
			continue
		}
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			<-p.done
		}
	}
	alive := false
	for _, p := range c.procs {
		alive = alive || (p.name == containerdBin && !p.exited())
	}
	if !alive {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := ctr(ctx, c.Dir, "tasks", "ls", "-q")
	if err != nil {
		c.logf("listing containerd tasks: %v", err)
		return
	}
	ids := strings.Fields(string(out))
	// The CRI plugin deletes a task itself once it has exited, so "not
	// found" is success here.
	for _, id := range ids {
		if _, err := ctr(ctx, c.Dir, "tasks", "kill", "--all", "--signal", "SIGKILL", id); err != nil && !strings.Contains(err.Error(), "not found") {
			c.logf("killing task %s: %v", id, err)
		}
	}
	for _, id := range ids {
		// --force waits for the killed task to exit before deleting it.
		if _, err := ctr(ctx, c.Dir, "tasks", "delete", "--force", id); err != nil && !strings.Contains(err.Error(), "not found") {
			c.logf("deleting task %s: %v", id, err)
		}
	}
}

// cleanupRealNode removes everything the real node made, once its
// components have stopped, restores the kernel tunables and releases the
// lock. Without the lock (StopDir of a detached node) it takes it first; if
// another real node has run since, that one's Start has removed this one's
// machine-wide leftovers, so only the mounts under Dir are left to remove.
func (c *ControlPlane) cleanupRealNode() error {
	lock := c.node.lock
	c.node.lock = nil
	if lock == nil {
		ctx, cancel := context.WithTimeout(context.Background(), lockWaitStop)
		defer cancel()
		var err error
		if lock, err = lockRealNode(ctx, c.logf); err != nil {
			return err
		}
	}
	defer lock.Close() // releases the flock
	rec, err := readNodeRecord()
	if err != nil {
		return err
	}
	if rec.Dir != c.Dir {
		return unmountUnder(c.Dir)
	}
	binDir := c.binDir
	if binDir == "" {
		binDir, _ = defaultBinDir()
	}
	if err := cleanupNode(c.Dir, binDir, rec.Sysctls, c.logf); err != nil {
		return err
	}
	if err := os.Remove(realNodeStatePath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// cleanupNode removes a real node's leftovers: processes (container shims and
// anything in its cgroups), iptables chains, mounts under dir, cgroups, the
// bridge and its veths, libcni's cache, and restores sysctls (if recorded).
// dir may be "" (only machine-wide names). It is idempotent.
func cleanupNode(dir, binDir string, sysctls map[string]string, logf func(string, ...any)) error {
	var errs []error
	killNodeProcesses(dir)
	errs = append(errs, cleanupIPTables(binDir, logf))
	if dir != "" {
		errs = append(errs, unmountUnder(dir))
	}
	errs = append(errs, removeCgroups(), removeBridge(), removeCNICache(dir), writeSysctls(sysctls))
	// Made by containerd's shims and libcni; removed only if empty.
	for _, d := range []string{"/run/containerd/s", "/run/containerd", "/var/lib/cni/results", "/var/lib/cni"} {
		_ = syscall.Rmdir(d)
	}
	return errors.Join(errs...)
}

// removeCNICache removes libcni's cached results (/var/lib/cni/results) of
// our network and of the loopback network containerd sets up in each of our
// pods (its cache names the pod's network namespace, which is under dir).
func removeCNICache(dir string) error {
	files, _ := filepath.Glob("/var/lib/cni/results/*")
	var errs []error
	for _, f := range files {
		ours := strings.HasPrefix(filepath.Base(f), cniNetwork+"-")
		if !ours && dir != "" {
			data, _ := os.ReadFile(f)
			ours = strings.Contains(string(data), `"`+nodeDir(dir)+"/")
		}
		if ours {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killNodeProcesses SIGKILLs the container shims of the containerd of dir and
// every process in the node's cgroups (containers), waits for them, and
// removes the sockets the killed shims leave in /run/containerd/s.
func killNodeProcesses(dir string) {
	pids := map[int]bool{}
	var shimSockets []string
	if dir != "" {
		sock := containerdSocket(dir)
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err != nil {
				continue
			}
			args := strings.Split(string(cmdline), "\x00")
			if strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && containsArg(args, sock) {
				pids[pid] = true
				shimSockets = append(shimSockets, unixSocketsOf(pid, "/run/containerd/s/")...)
			}
		}
	}
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, nodeCgroupRoot), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids[pid] = true
				}
			}
			return nil
		})
	}
	for pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for pid := range pids {
		for pidAlive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // polling /proc: no way to wait for a non-child
		}
	}
	for _, s := range shimSockets {
		_ = os.Remove(s)
	}
}

// unixSocketsOf returns the paths under prefix of the unix sockets that pid
// has open (a shim's listening socket is named after a hash we cannot redo).
func unixSocketsOf(pid int, prefix string) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", pid))
	if err != nil {
		return nil
	}
	byInode := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		// Num RefCount Protocol Flags Type St Inode Path
		if f := strings.Fields(line); len(f) == 8 && strings.HasPrefix(f[7], prefix) {
			byInode[f[6]] = f[7]
		}
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	var out []string
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		if p, ok := byInode[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")]; ok {
			out = append(out, p)
		}
	}
	return out
}

func containsArg(args []string, want string) bool {
	for _, a := range args {
		if a == want {
			return true
		}
	}
	return false
}

// cleanupIPTables removes kube-proxy's rules (`kube-proxy --cleanup`) and
// then any KUBE-* chain left in the filter, nat and mangle tables (the
// kubelet's KUBE-FIREWALL, KUBE-KUBELET-CANARY, ...), IPv4 and IPv6. No one
// else on the machine runs Kubernetes nodes: the real-node lock is held.
func cleanupIPTables(binDir string, logf func(string, ...any)) error {
	if binDir != "" {
		if _, err := os.Stat(filepath.Join(binDir, kubeProxyBin)); err == nil {
			// It also tries modes never used here; its exit status says little.
			if out, err := exec.Command(filepath.Join(binDir, kubeProxyBin), "--cleanup").CombinedOutput(); err != nil {
				logf("kube-proxy --cleanup: %v: %s", err, strings.TrimSpace(string(out)))
			}
		}
	}
	var errs []error
	for _, bin := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(bin); err != nil {
			continue
		}
		for _, table := range []string{"filter", "nat", "mangle"} {
			errs = append(errs, removeKubeChains(bin, table))
		}
	}
	return errors.Join(errs...)
}

// removeKubeChains deletes the rules that jump to KUBE-* chains from the
// other chains of table, then flushes and deletes the KUBE-* chains.
func removeKubeChains(bin, table string) error {
	out, err := exec.Command(bin, "-w", "-t", table, "-S").Output()
	if err != nil {
		return nil // table not available (module not loaded): nothing of ours
	}
	var chains []string
	var errs []error
	for _, line := range strings.Split(string(out), "\n") {
		f := splitRule(line)
		switch {
		case len(f) == 2 && f[0] == "-N" && strings.HasPrefix(f[1], "KUBE-"):
			chains = append(chains, f[1])
		case len(f) > 2 && f[0] == "-A" && !strings.HasPrefix(f[1], "KUBE-") && jumpsToKube(f):
			if o, err := exec.Command(bin, append([]string{"-w", "-t", table, "-D"}, f[1:]...)...).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("%s -t %s -D %s: %w: %s", bin, table, strings.Join(f[1:], " "), err, o))
			}
		}
	}
	for _, op := range []string{"-F", "-X"} {
		for _, ch := range chains {
			if o, err := exec.Command(bin, "-w", "-t", table, op, ch).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("%s -t %s %s %s: %w: %s", bin, table, op, ch, err, o))
			}
		}
	}
	return errors.Join(errs...)
}

func jumpsToKube(f []string) bool {
	for i := 0; i+1 < len(f); i++ {
		if (f[i] == "-j" || f[i] == "-g") && strings.HasPrefix(f[i+1], "KUBE-") {
			return true
		}
	}
	return false
}

// splitRule splits a line of `iptables -S` into arguments; it quotes
// arguments with spaces ("kubernetes service portals") with double quotes
// and escapes quotes inside with a backslash.
func splitRule(line string) []string {
	var out []string
	var cur strings.Builder
	inArg, quoted := false, false
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case quoted && ch == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case ch == '"':
			quoted = !quoted
			inArg = true
		case !quoted && (ch == ' ' || ch == '\t'):
			if inArg {
				out = append(out, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteByte(ch)
			inArg = true
		}
	}
	if inArg {
		out = append(out, cur.String())
	}
	return out
}

// mountsUnder returns the mount points under dir (dir included), deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out, nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder lazily unmounts every mount under dir (container root
// filesystems, pod volumes, network namespaces, the kubelet's rshared bind
// mount of its root-dir), deepest first, until none is left.
func unmountUnder(dir string) error {
	for range 10 { // mounts can be stacked on one mount point
		mps, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		for _, mp := range mps {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				return fmt.Errorf("unmounting %s: %w", mp, err)
			}
		}
	}
	mps, err := mountsUnder(dir)
	if err == nil && len(mps) > 0 {
		err = fmt.Errorf("still mounted under %s: %s", dir, strings.Join(mps, ", "))
	}
	return err
}

// removeCgroups removes nodeCgroupRoot and its descendants in every
// hierarchy, deepest first; their processes have been killed.
func removeCgroups() error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h, nodeCgroupRoot)
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- { // WalkDir lists parents first
			var err error
			// A cgroup whose last process has just died can be busy a moment.
			for try := 0; try < 50; try++ {
				if err = syscall.Rmdir(dirs[i]); err == nil || errors.Is(err, syscall.ENOENT) || !errors.Is(err, syscall.EBUSY) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// removeBridge deletes the veths on the bridge, then the bridge.
func removeBridge() error {
	if !linkExists(RealNodeBridge) {
		return nil
	}
	ports, _ := os.ReadDir("/sys/class/net/" + RealNodeBridge + "/brif")
	var errs []error
	for _, p := range ports {
		// A veth also goes when its pod's network namespace does, maybe just now.
		if out, err := exec.Command("ip", "link", "del", p.Name()).CombinedOutput(); err != nil && linkExists(p.Name()) {
			errs = append(errs, fmt.Errorf("ip link del %s: %w: %s", p.Name(), err, out))
		}
	}
	if out, err := exec.Command("ip", "link", "del", RealNodeBridge).CombinedOutput(); err != nil && linkExists(RealNodeBridge) {
		errs = append(errs, fmt.Errorf("ip link del %s: %w: %s", RealNodeBridge, err, out))
	}
	return errors.Join(errs...)
}

func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

func readSysctls() (map[string]string, error) {
	out := make(map[string]string, len(kubeletSysctls))
	for _, k := range kubeletSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return nil, fmt.Errorf("reading sysctl %s: %w", k, err)
		}
		out[k] = strings.TrimSpace(string(v))
	}
	return out, nil
}

// writeSysctls restores recorded values that differ from the current ones.
func writeSysctls(vals map[string]string) error {
	var errs []error
	for k, v := range vals {
		p := filepath.Join("/proc/sys", k)
		if cur, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", k, v, err))
		}
	}
	return errors.Join(errs...)
}
