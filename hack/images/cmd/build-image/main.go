// Command build-image builds a single-binary container image from a Go
// package and writes it as a docker archive for `ctr images import`, without
// Docker. See package github.com/configstamp/configstamp/hack/images.
//
//	build-image -preset pause -o bin/images/pause.tar
//	build-image -package ./cmd/foo -ref example.test/foo:dev -binary /foo \
//	    -user 65532:65532 -o foo.tar -env A=1 -label k=v
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/configstamp/configstamp/hack/images"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var (
		preset     = flag.String("preset", "", fmt.Sprintf("a predefined image %v; other flags override its fields", images.PresetNames()))
		pkg        = flag.String("package", "", "Go package to build")
		dir        = flag.String("dir", ".", "directory go build runs in (the module root)")
		ref        = flag.String("ref", "", "image reference with registry and tag, e.g. registry.k8s.io/pause:3.10")
		out        = flag.String("o", "", "output docker archive path")
		binary     = flag.String("binary", "", "absolute path of the binary in the image")
		user       = flag.String("user", "", "numeric uid:gid the container runs as")
		goarch     = flag.String("arch", "", "GOARCH (default: the host's)")
		entrypoint listFlag
		env        listFlag
		labels     listFlag
	)
	flag.Var(&entrypoint, "entrypoint", "entrypoint element (repeat; default: the binary)")
	flag.Var(&env, "env", "KEY=value for the image config (repeat)")
	flag.Var(&labels, "label", "key=value image label (repeat)")
	flag.Parse()
	if flag.NArg() != 0 {
		fatalf("unexpected arguments %q", flag.Args())
	}

	var spec images.Spec
	if *preset != "" {
		var err error
		if spec, err = images.Preset(*preset, *dir, "."); err != nil {
			fatalf("%v", err)
		}
		spec.Output = ""
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	spec.Dir = *dir
	set(&spec.Package, *pkg)
	set(&spec.Ref, *ref)
	set(&spec.Output, *out)
	set(&spec.Binary, *binary)
	set(&spec.User, *user)
	set(&spec.GOARCH, *goarch)
	if len(entrypoint) > 0 {
		spec.Entrypoint = entrypoint
	}
	spec.Env = append(spec.Env, env...)
	if len(labels) > 0 {
		m := make(map[string]string, len(spec.Labels)+len(labels))
		for k, v := range spec.Labels {
			m[k] = v
		}
		for _, l := range labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				fatalf("-label %q: want key=value", l)
			}
			m[k] = v
		}
		spec.Labels = m
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := images.Build(ctx, spec); err != nil {
		fatalf("%v", err)
	}
	fi, err := os.Stat(spec.Output)
	if err != nil {
		fatalf("%v", err)
	}
	fmt.Printf("wrote %s (%s, %d bytes)\n", spec.Output, spec.Ref, fi.Size())
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "build-image: "+format+"\n", args...)
	os.Exit(1)
}
