// Package nodeconfig is what the real node of test/localcp (Options.RealNode)
// decides about its host without running anything: the host's cgroup mode,
// what the kubelet needs of it, and the kubelet's and containerd's
// configuration files for that mode. It is a package of its own so that its
// unit tests run anywhere, without root and without the real node.
//
// # cgroup v1 and cgroup v2
//
// The kubelet and runc decide the cgroup mode as libcontainer does: the
// filesystem type of /sys/fs/cgroup. cgroup2fs there is the unified mode
// (cgroup v2 only). A tmpfs with one cgroup v1 hierarchy per controller is
// v1, called "hybrid" when a cgroup2 hierarchy is also mounted at
// /sys/fs/cgroup/unified (which only systemd uses): to the kubelet and runc
// that is v1 too. The real node uses the cgroupfs driver in every mode (the
// kubelet's cgroupDriver, runc's SystemdCgroup = false in containerd's CRI
// runtime): it works on both and needs no systemd, which a test machine or a
// container may lack.
//
// What differs:
//   - v1: the kubelet (1.35 and later) refuses to start unless failCgroupV1
//     is false, and needs the cpu, cpuacct, cpuset and memory hierarchies
//     mounted. Its cgroupRoot is made in every hierarchy.
//   - v2: failCgroupV1 is true (a kubelet that finds v1 after all refuses to
//     start). The kubelet validates its cgroupRoot by the controllers the
//     root cgroup passes down: every one of cpu, cpuset, hugetlb, memory and
//     pids that the kernel offers must be in the root's
//     cgroup.subtree_control, or it exits with "invalid configuration: cgroup
//     ... has some missing controllers". PrepareV2 enables them there (which
//     systemd has mostly done already). Inside a container whose cgroup
//     namespace root holds processes the kernel refuses that (no internal
//     processes below the real root), and PrepareV2 says so.
package nodeconfig

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// ErrUnsupported is wrapped by every error that means: this host cannot run
// the real node, for the reason the message gives.
var ErrUnsupported = errors.New("this host cannot run the real node")

// Mode is the host's cgroup mode as the kubelet and runc see it.
type Mode string

const (
	V1 Mode = "v1"
	// Hybrid is v1 hierarchies plus systemd's cgroup2 hierarchy at
	// /sys/fs/cgroup/unified: v1 to the kubelet and runc.
	Hybrid Mode = "hybrid"
	V2     Mode = "v2"
)

// Filesystem magic numbers (linux/magic.h).
const (
	Cgroup2SuperMagic = 0x63677270
	TmpfsMagic        = 0x01021994
)

// Mountpoint is where the kubelet and runc look for cgroups.
const Mountpoint = "/sys/fs/cgroup"

// String is how messages name the mode.
func (m Mode) String() string {
	switch m {
	case V2:
		return "cgroup v2 (unified)"
	case Hybrid:
		return "cgroup v1 (hybrid: v1 hierarchies, systemd's cgroup2 at /sys/fs/cgroup/unified)"
	case V1:
		return "cgroup v1"
	}
	return "unknown cgroup mode"
}

// Unified reports whether the kubelet and runc use cgroup v2.
func (m Mode) Unified() bool { return m == V2 }

// ModeOf decides the mode from the filesystem types (statfs f_type) of
// /sys/fs/cgroup and of /sys/fs/cgroup/unified (0 when that is not there).
func ModeOf(rootMagic, unifiedMagic int64) (Mode, error) {
	switch rootMagic {
	case Cgroup2SuperMagic:
		return V2, nil
	case TmpfsMagic:
		if unifiedMagic == Cgroup2SuperMagic {
			return Hybrid, nil
		}
		return V1, nil
	}
	return "", fmt.Errorf("%w: %s is neither cgroup2fs nor a tmpfs of cgroup v1 hierarchies (filesystem type 0x%x): no cgroups for the kubelet",
		ErrUnsupported, Mountpoint, rootMagic)
}

// Settings are the cgroup lines of the kubelet's and containerd's
// configuration for a mode.
type Settings struct {
	// CgroupDriver is the kubelet's cgroupDriver.
	CgroupDriver string
	// SystemdCgroup is runc's option in containerd's CRI runtime; it agrees
	// with CgroupDriver (false for cgroupfs).
	SystemdCgroup bool
	// FailCgroupV1 is the kubelet's failCgroupV1: false lets kubelet 1.35+
	// run on cgroup v1 at all; true on v2, so that a kubelet that finds v1
	// after all refuses to start instead of running half-configured.
	FailCgroupV1 bool
}

// SettingsFor returns the settings for mode.
func SettingsFor(m Mode) Settings {
	return Settings{CgroupDriver: "cgroupfs", SystemdCgroup: false, FailCgroupV1: m.Unified()}
}

// V1KubeletSubsystems are the cgroup v1 hierarchies the kubelet needs
// mounted (its validateSystemRequirements).
var V1KubeletSubsystems = []string{"cpu", "cpuacct", "cpuset", "memory"}

// MissingV1Subsystems returns the V1KubeletSubsystems that no cgroup (v1)
// mount in mounts (the text of /proc/mounts) carries as an option.
func MissingV1Subsystems(mounts string) []string {
	have := map[string]bool{}
	for _, line := range strings.Split(mounts, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[2] != "cgroup" {
			continue
		}
		for _, opt := range strings.Split(f[3], ",") {
			have[opt] = true
		}
	}
	var missing []string
	for _, s := range V1KubeletSubsystems {
		if !have[s] {
			missing = append(missing, s)
		}
	}
	return missing
}

// V2KubeletControllers are the controllers the kubelet validates its
// cgroupRoot by on cgroup v2 (getSupportedUnifiedControllers), less those
// the kernel lacks; V2RequiredControllers are those a node cannot do without
// (CPU and memory requests and limits, the cpuset of a pod, pids limits).
var (
	V2KubeletControllers  = []string{"cpu", "cpuset", "hugetlb", "memory", "pids"}
	V2RequiredControllers = []string{"cpu", "cpuset", "memory", "pids"}
)

// FS is the cgroup filesystem as PrepareV2 uses it: the host's (OSFS) or, in
// unit tests, a fake that keeps the kernel's rules.
type FS interface {
	ReadFile(path string) (string, error)
	// WriteFile writes data to an existing control file.
	WriteFile(path, data string) error
	MkdirAll(path string) error
}

// PrepareV2 makes the kubelet's cgroupRoot usable on a cgroup v2 hierarchy
// mounted at mount: it checks that the kernel offers the required
// controllers, enables the kubelet's controllers in the root's
// cgroup.subtree_control, and, when create, creates cgroupRoot and checks
// that it offers them all. Every error it returns wraps ErrUnsupported and
// says what is missing and why.
func PrepareV2(fs FS, mount, cgroupRoot string, create bool) error {
	ctrlFile := filepath.Join(mount, "cgroup.controllers")
	avail, err := fs.ReadFile(ctrlFile)
	if err != nil {
		return fmt.Errorf("%w: %s (cgroup v2): reading the root's controllers: %w", ErrUnsupported, mount, err)
	}
	available := strings.Fields(avail)
	var missing []string
	for _, c := range V2RequiredControllers {
		if !slices.Contains(available, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: cgroup v2 at %s offers no %s controller (%s: %q): the kernel lacks it or a cgroup v1 hierarchy holds it; the kubelet needs %s",
			ErrUnsupported, mount, strings.Join(missing, ", "), ctrlFile, strings.TrimSpace(avail), strings.Join(V2RequiredControllers, ", "))
	}
	var want []string
	for _, c := range V2KubeletControllers {
		if slices.Contains(available, c) {
			want = append(want, c)
		}
	}
	subtree := filepath.Join(mount, "cgroup.subtree_control")
	enabled, err := fs.ReadFile(subtree)
	if err != nil {
		return fmt.Errorf("%w: cgroup v2 at %s: %w", ErrUnsupported, mount, err)
	}
	var enable []string
	for _, c := range want {
		if !slices.Contains(strings.Fields(enabled), c) {
			enable = append(enable, "+"+c)
		}
	}
	if len(enable) > 0 {
		if err := fs.WriteFile(subtree, strings.Join(enable, " ")); err != nil {
			hint := "is /sys/fs/cgroup read-only here (a container without --privileged)?"
			if errors.Is(err, syscall.EBUSY) {
				hint = "the kernel allows controllers below a cgroup that holds processes only at the real root: this runs inside a container whose cgroup namespace root holds its processes; run it on the host (as GitHub's runners do), in a container with --cgroupns=host, or move the container's processes into a child cgroup first (as kind's entrypoint does)"
			}
			return fmt.Errorf("%w: cgroup v2 at %s: cannot enable %s in %s: %w; %s",
				ErrUnsupported, mount, strings.Join(enable, " "), subtree, err, hint)
		}
	}
	if !create {
		return nil
	}
	dir := filepath.Join(mount, cgroupRoot)
	if err := fs.MkdirAll(dir); err != nil {
		return fmt.Errorf("%w: creating cgroup %s: %w", ErrUnsupported, dir, err)
	}
	got, err := fs.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("%w: cgroup %s: %w", ErrUnsupported, dir, err)
	}
	missing = nil
	for _, c := range want {
		if !slices.Contains(strings.Fields(got), c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: cgroup %s lacks the controllers %s after they were enabled in %s (it offers %q): the kubelet would exit with \"cgroup ... has some missing controllers\"",
			ErrUnsupported, dir, strings.Join(missing, ", "), subtree, strings.TrimSpace(got))
	}
	return nil
}
