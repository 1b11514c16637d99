package nodeconfig

import (
	"errors"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestModeOf(t *testing.T) {
	for _, tc := range []struct {
		name          string
		root, unified int64
		want          Mode
	}{
		{"cgroup2fs at /sys/fs/cgroup", Cgroup2SuperMagic, 0, V2},
		{"tmpfs of v1 hierarchies", TmpfsMagic, 0, V1},
		{"tmpfs with systemd's cgroup2 at unified", TmpfsMagic, Cgroup2SuperMagic, Hybrid},
		{"tmpfs with something else at unified", TmpfsMagic, TmpfsMagic, V1},
	} {
		got, err := ModeOf(tc.root, tc.unified)
		if err != nil || got != tc.want {
			t.Errorf("%s: ModeOf(0x%x, 0x%x) = %q, %v; want %q", tc.name, tc.root, tc.unified, got, err, tc.want)
		}
	}
	const ext4 = 0xEF53
	if m, err := ModeOf(ext4, 0); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "0xef53") {
		t.Errorf("ModeOf(ext4) = %q, %v; want ErrUnsupported naming the type", m, err)
	}
	if !V2.Unified() || V1.Unified() || Hybrid.Unified() {
		t.Error("only V2 is unified: the kubelet and runc treat hybrid as v1")
	}
}

// TestDetectAgreesWithMountinfo checks Detect (statfs) on this machine against
// what /proc/self/mountinfo says is mounted at /sys/fs/cgroup and at
// /sys/fs/cgroup/unified: the same answer by another route, on whatever mode
// the machine has.
func TestDetectAgreesWithMountinfo(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("cgroups are Linux's")
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	fstype := map[string]string{} // mount point -> type; the last mount wins, as it hides the others
	for _, line := range strings.Split(string(data), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 5 && len(g) >= 1 {
			fstype[f[4]] = g[0]
		}
	}
	var want Mode
	switch fstype[Mountpoint] {
	case "cgroup2":
		want = V2
	case "tmpfs":
		want = V1
		if fstype[Mountpoint+"/unified"] == "cgroup2" {
			want = Hybrid
		}
	default:
		t.Skipf("%s is mounted as %q here: no cgroups to detect", Mountpoint, fstype[Mountpoint])
	}
	got, err := Detect()
	if err != nil || got != want {
		t.Fatalf("Detect() = %q, %v; mountinfo says %q", got, err, want)
	}
	t.Logf("this machine: %s", got)
}

func TestSettingsFor(t *testing.T) {
	for _, m := range []Mode{V1, Hybrid, V2} {
		s := SettingsFor(m)
		if s.CgroupDriver != "cgroupfs" || s.SystemdCgroup {
			t.Errorf("%s: driver %q, SystemdCgroup %v; want cgroupfs for both the kubelet and runc", m, s.CgroupDriver, s.SystemdCgroup)
		}
		if s.FailCgroupV1 != (m == V2) {
			t.Errorf("%s: failCgroupV1 %v; want false on v1 (kubelet 1.35+ refuses v1 otherwise), true on v2", m, s.FailCgroupV1)
		}
	}
}

func TestMissingV1Subsystems(t *testing.T) {
	// This machine's /proc/mounts (hybrid), trimmed.
	full := `tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,nosuid,nodev,noexec,relatime,xattr,name=systemd 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,nosuid,nodev,noexec,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,nosuid,nodev,noexec,relatime,pids 0 0
`
	if got := MissingV1Subsystems(full); len(got) != 0 {
		t.Errorf("all hierarchies mounted: missing %v", got)
	}
	noCpuset := strings.ReplaceAll(full, "cgroup /sys/fs/cgroup/cpuset cgroup rw,nosuid,nodev,noexec,relatime,cpuset 0 0\n", "")
	if got := MissingV1Subsystems(noCpuset); !slices.Equal(got, []string{"cpuset"}) {
		t.Errorf("without cpuset: missing %v; want [cpuset]", got)
	}
	// cgroup2's options never count as v1 hierarchies.
	if got := MissingV1Subsystems("cgroup2 /sys/fs/cgroup cgroup2 rw,cpu,memory 0 0\n"); len(got) != 4 {
		t.Errorf("cgroup2 only: missing %v; want all four", got)
	}
}

// fakeV2 is a cgroup v2 hierarchy with the kernel's rules that PrepareV2
// meets: a child's cgroup.controllers is its parent's subtree_control; a
// controller can be enabled only if the cgroup offers it; below the real
// root, not in a cgroup that holds processes (EBUSY); nothing on a read-only
// mount (EROFS).
type fakeV2 struct {
	kernel   []string            // the root's cgroup.controllers
	subtree  map[string][]string // cgroup dir -> subtree_control
	procs    map[string]bool     // cgroup dir -> holds processes
	realRoot bool                // the mount is the real root (not a cgroup namespace's)
	readOnly bool
	writes   int
}

const fakeMount = "/sys/fs/cgroup"

func newFakeV2(kernel, rootSubtree []string) *fakeV2 {
	return &fakeV2{kernel: kernel, subtree: map[string][]string{fakeMount: rootSubtree}, procs: map[string]bool{fakeMount: true}, realRoot: true}
}

func (f *fakeV2) ReadFile(p string) (string, error) {
	dir, file := path.Split(p)
	dir = path.Clean(dir)
	sub, ok := f.subtree[dir]
	if !ok {
		return "", &os.PathError{Op: "open", Path: p, Err: syscall.ENOENT}
	}
	switch file {
	case "cgroup.subtree_control":
		return strings.Join(sub, " ") + "\n", nil
	case "cgroup.controllers":
		if dir == fakeMount {
			return strings.Join(f.kernel, " ") + "\n", nil
		}
		return strings.Join(f.subtree[path.Dir(dir)], " ") + "\n", nil
	}
	return "", &os.PathError{Op: "open", Path: p, Err: syscall.ENOENT}
}

func (f *fakeV2) WriteFile(p, data string) error {
	f.writes++
	dir, file := path.Split(p)
	dir = path.Clean(dir)
	if f.readOnly {
		return &os.PathError{Op: "open", Path: p, Err: syscall.EROFS}
	}
	if file != "cgroup.subtree_control" {
		return &os.PathError{Op: "write", Path: p, Err: syscall.EINVAL}
	}
	offered, _ := f.ReadFile(path.Join(dir, "cgroup.controllers"))
	for _, tok := range strings.Fields(data) {
		c, ok := strings.CutPrefix(tok, "+")
		if !ok || !slices.Contains(strings.Fields(offered), c) {
			return &os.PathError{Op: "write", Path: p, Err: syscall.ENOENT}
		}
		if f.procs[dir] && (dir != fakeMount || !f.realRoot) {
			return &os.PathError{Op: "write", Path: p, Err: syscall.EBUSY}
		}
		if !slices.Contains(f.subtree[dir], c) {
			f.subtree[dir] = append(f.subtree[dir], c)
		}
	}
	return nil
}

func (f *fakeV2) MkdirAll(p string) error {
	if f.readOnly {
		return &os.PathError{Op: "mkdir", Path: p, Err: syscall.EROFS}
	}
	if _, ok := f.subtree[p]; !ok {
		f.subtree[p] = nil
	}
	return nil
}

const cgroupRoot = "/configstamp-realnode"

// allKernel is what cgroup.controllers lists on a current kernel (Ubuntu
// 24.04, as on GitHub's runners).
var allKernel = []string{"cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"}

func TestPrepareV2EnablesWhatTheKubeletValidates(t *testing.T) {
	// systemd enables what its units use; hugetlb is none of them.
	fs := newFakeV2(allKernel, []string{"cpuset", "cpu", "io", "memory", "pids"})
	if err := PrepareV2(fs, fakeMount, cgroupRoot, true); err != nil {
		t.Fatal(err)
	}
	got, _ := fs.ReadFile(path.Join(fakeMount, cgroupRoot, "cgroup.controllers"))
	for _, c := range V2KubeletControllers {
		if !slices.Contains(strings.Fields(got), c) {
			t.Errorf("%s offers %q, without %s: the kubelet would refuse its cgroupRoot", cgroupRoot, got, c)
		}
	}
	// Nothing left to enable: a second run writes nothing.
	fs.writes = 0
	if err := PrepareV2(fs, fakeMount, cgroupRoot, true); err != nil || fs.writes != 0 {
		t.Errorf("second PrepareV2: %v, %d writes; want none", err, fs.writes)
	}
}

func TestPrepareV2WithoutHugetlb(t *testing.T) {
	kernel := []string{"cpuset", "cpu", "io", "memory", "pids"} // CONFIG_CGROUP_HUGETLB off
	fs := newFakeV2(kernel, []string{"memory", "pids"})
	if err := PrepareV2(fs, fakeMount, cgroupRoot, true); err != nil {
		t.Fatalf("a kernel without hugetlb: %v; the kubelet only validates what the kernel offers", err)
	}
}

func TestPrepareV2Unsupported(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   func() *fakeV2
		want []string // in the message
	}{
		{
			name: "the kernel offers no cpuset (bound to a v1 hierarchy)",
			fs: func() *fakeV2 {
				return newFakeV2([]string{"cpu", "io", "memory", "pids"}, nil)
			},
			want: []string{"offers no cpuset controller", "cgroup.controllers", "the kubelet needs cpu, cpuset, memory, pids"},
		},
		{
			name: "inside a container whose cgroup namespace root holds processes",
			fs: func() *fakeV2 {
				f := newFakeV2(allKernel, nil)
				f.realRoot = false
				return f
			},
			want: []string{"cannot enable +cpu +cpuset +hugetlb +memory +pids", "device or resource busy", "inside a container whose cgroup namespace root holds its processes", "--cgroupns=host"},
		},
		{
			name: "read-only /sys/fs/cgroup",
			fs: func() *fakeV2 {
				f := newFakeV2(allKernel, []string{"cpu"})
				f.readOnly = true
				return f
			},
			want: []string{"read-only file system", "read-only here"},
		},
	} {
		err := PrepareV2(tc.fs(), fakeMount, cgroupRoot, true)
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v; want ErrUnsupported", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", tc.name, err, w)
			}
		}
	}
	// The same container once it moved its processes into a child (kind's
	// entrypoint): supported.
	f := newFakeV2(allKernel, nil)
	f.realRoot = false
	f.procs[fakeMount] = false
	if err := PrepareV2(f, fakeMount, cgroupRoot, true); err != nil {
		t.Errorf("container with an empty cgroup namespace root: %v", err)
	}
}

func TestPrepareV2PreflightCreatesNothing(t *testing.T) {
	fs := newFakeV2(allKernel, []string{"cpu"})
	if err := PrepareV2(fs, fakeMount, cgroupRoot, false); err != nil {
		t.Fatal(err)
	}
	if _, ok := fs.subtree[path.Join(fakeMount, cgroupRoot)]; ok {
		t.Error("the preflight (create false) created the kubelet's cgroupRoot")
	}
}
