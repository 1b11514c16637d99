//go:build linux

package nodeconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// OSFS is the host's cgroup filesystem.
type OSFS struct{}

// ReadFile reads a control file.
func (OSFS) ReadFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// WriteFile writes data to an existing control file (no O_CREATE, no O_TRUNC).
func (OSFS) WriteFile(path, data string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(data)
	return errors.Join(err, f.Close())
}

// MkdirAll creates a cgroup and its parents.
func (OSFS) MkdirAll(path string) error { return os.MkdirAll(path, 0o755) }

// Detect reads the filesystem types of /sys/fs/cgroup and
// /sys/fs/cgroup/unified, as libcontainer does.
func Detect() (Mode, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(Mountpoint, &st); err != nil {
		return "", fmt.Errorf("%w: statfs %s: %w", ErrUnsupported, Mountpoint, err)
	}
	var unified int64
	var ust syscall.Statfs_t
	if err := syscall.Statfs(filepath.Join(Mountpoint, "unified"), &ust); err == nil {
		unified = int64(ust.Type) //nolint:unconvert // int64 on amd64, not on every GOARCH
	}
	return ModeOf(int64(st.Type), unified) //nolint:unconvert // as above
}

// CheckHost is the real node's cgroup preflight: the mode, and what the
// kubelet needs of it. On cgroup v2 it enables the kubelet's controllers in
// the root's cgroup.subtree_control, as the node's start does (PrepareV2
// without creating cgroupRoot); on v1 it only reads /proc/mounts.
func CheckHost(cgroupRoot string) (Mode, error) {
	mode, err := Detect()
	if err != nil {
		return mode, err
	}
	if mode.Unified() {
		return mode, PrepareV2(OSFS{}, Mountpoint, cgroupRoot, false)
	}
	mounts, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return mode, err
	}
	if missing := MissingV1Subsystems(string(mounts)); len(missing) > 0 {
		return mode, fmt.Errorf("%w: %s: no cgroup v1 hierarchy is mounted with %v, which the kubelet needs (%v)",
			ErrUnsupported, mode, missing, V1KubeletSubsystems)
	}
	return mode, nil
}
