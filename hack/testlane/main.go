// Command testlane runs the tests of several packages as go test does, but
// with its builds apart from its runs: each package's test binary is built
// (go test -c) one after another in the order given, while up to -p built
// binaries run at once.
//
// go test -p N counts builds and test runs against the same N. In make
// test's rest lane (-p 2) the two longest packages ran for six minutes
// and, meanwhile, nothing was built; every later package was compiled
// and linked only when a slot freed, and the lane's last eight minutes on
// a fresh machine were forty short packages built one by one, each linked
// while the other slot sat waiting (measured with process accounting:
// test/manifests ended 1,414 s in, the lane 1,868 s). Here the binaries are
// built while the long packages run, and a slot that frees finds the next
// package ready.
//
//	testlane [-p N] [-o DIR] [-nice N] [-testflags 'go test flags'] packages...
//
// -testflags takes go test's test flags (-v, -run, -count, -timeout,
// -parallel, ...) and passes them to each binary as -test.*. When a
// package ends, its output is printed (as go test does with several
// packages: a passing one's only with -v; with -p 1 and -v, as it comes),
// then go test's own line:
// "ok  <pkg> <time>", "FAIL <pkg> <time>" or "?   <pkg> [no test files]".
// The binary runs in its package's directory, as under go test. The exit
// status is 1 when a package failed or did not build.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testlane:", err)
		os.Exit(2)
	}
}

func run() error {
	p := flag.Int("p", 2, "how many test binaries run at once")
	out := flag.String("o", filepath.Join(os.TempDir(), "testlane-bin"), "directory for the test binaries")
	nice := flag.Int("nice", 0, "niceness of the builds (go test -c), so the running tests keep the CPU they need")
	testflags := flag.String("testflags", "", "go test's test flags, for every package (e.g. '-count=1 -v -timeout 40m')")
	flag.Parse()
	if *p < 1 {
		return errors.New("-p must be at least 1")
	}
	args, err := binaryFlags(strings.Fields(*testflags))
	if err != nil {
		return err
	}
	pkgs, err := list(flag.Args())
	if err != nil {
		return err
	}
	// One at a time with -v, output is shown as it comes, as go test -p 1
	// -v shows it (a real-node suite runs for twenty minutes).
	stream := *p == 1 && hasArg(args, "-test.v")
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	l := &lane{
		slots: *p,
		build: func(pk pkg) (string, error) { return build(pk, *out, *nice) },
		run: func(pk pkg, bin string) result {
			defer func() { _ = os.Remove(bin) }() // as go test does: forty binaries are gigabytes
			return runBinary(pk, bin, args, stream)
		},
		print: func(r result) { _, _ = os.Stdout.Write(r.report()) },
	}
	if failed := l.do(pkgs); failed > 0 {
		os.Exit(1)
	}
	return nil
}

// pkg is one package to test.
type pkg struct {
	importPath, dir string
	// tests says whether it has test files at all.
	tests bool
	// binary is its test binary's file name: the package's last path
	// element, as go test names it (what ps and process accounting show),
	// with the elements before it when that name is taken.
	binary string
}

// list resolves the patterns with go list, in their order.
func list(patterns []string) ([]pkg, error) {
	if len(patterns) == 0 {
		return nil, errors.New("no packages given")
	}
	cmd := exec.Command("go", append([]string{"list", "-f",
		"{{.ImportPath}}\t{{.Dir}}\t{{if or .TestGoFiles .XTestGoFiles}}tests{{end}}"}, patterns...)...)
	cmd.Stderr = os.Stderr
	raw, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	var pkgs []pkg
	for _, line := range strings.Split(strings.TrimRight(string(raw), "\n"), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("go list printed %q", line)
		}
		pkgs = append(pkgs, pkg{importPath: f[0], dir: f[1], tests: f[2] == "tests"})
	}
	nameBinaries(pkgs)
	return pkgs, nil
}

// nameBinaries names each package's test binary: the last element of its
// import path, or the last two (three, ...) joined by "-" when taken.
func nameBinaries(pkgs []pkg) {
	taken := map[string]bool{}
	for i := range pkgs {
		elems := strings.Split(pkgs[i].importPath, "/")
		for n := 1; n <= len(elems); n++ {
			name := strings.Join(elems[len(elems)-n:], "-") + ".test"
			if !taken[name] || n == len(elems) {
				pkgs[i].binary, taken[name] = name, true
				break
			}
		}
	}
}

// testFlags are go test's flags that belong to the test binary.
var testFlags = map[string]bool{
	"bench": true, "benchmem": true, "benchtime": true, "blockprofile": true, "count": true,
	"cpu": true, "cpuprofile": true, "failfast": true, "fullpath": true, "list": true,
	"memprofile": true, "mutexprofile": true, "outputdir": true, "parallel": true, "run": true,
	"short": true, "shuffle": true, "skip": true, "timeout": true, "trace": true, "v": true,
}

// binaryFlags turns go test's test flags into the test binary's (-v into
// -test.v, -timeout 40m into -test.timeout 40m), refusing go test's own
// (-race, -vet, -p: set them on the build, not here).
func binaryFlags(goTest []string) ([]string, error) {
	out := []string{"-test.paniconexit0"} // as go test passes it
	for i := 0; i < len(goTest); i++ {
		a := goTest[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || !testFlags[name] {
			return nil, fmt.Errorf("-testflags: %q is not one of go test's test flags", a)
		}
		flagArg := "-test." + name
		if hasValue {
			flagArg += "=" + value
		}
		out = append(out, flagArg)
		// Every test flag but the booleans takes a value, here or next.
		boolean := name == "v" || name == "short" || name == "failfast" || name == "benchmem" || name == "fullpath"
		if !hasValue && !boolean {
			if i+1 >= len(goTest) {
				return nil, fmt.Errorf("-testflags: %s needs a value", a)
			}
			i++
			out = append(out, goTest[i])
		}
	}
	return out, nil
}

// build compiles pk's test binary into dir; "" without test files.
func build(pk pkg, dir string, nice int) (string, error) {
	if !pk.tests {
		return "", nil
	}
	bin := filepath.Join(dir, pk.binary)
	// -s -w as go test links the binaries it runs: without the symbol
	// table and DWARF, a link takes a third less CPU.
	args := []string{"test", "-c", "-vet=off", "-ldflags=-s -w", "-o", bin, pk.importPath}
	name := "go"
	if nice != 0 {
		name, args = "nice", append([]string{"-n", fmt.Sprint(nice), "go"}, args...)
	}
	cmd := exec.Command(name, args...)
	var msg bytes.Buffer
	cmd.Stdout, cmd.Stderr = &msg, &msg
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s%w", msg.Bytes(), err)
	}
	return bin, nil
}

// result is one package's outcome.
type result struct {
	pkg     pkg
	output  []byte
	elapsed time.Duration
	// err is the build's or the run's failure.
	err     error
	noTests bool
	built   bool
}

// report is what go test prints for the package.
func (r result) report() []byte {
	var b bytes.Buffer
	b.Write(r.output)
	switch {
	case r.noTests:
		fmt.Fprintf(&b, "?   \t%s\t[no test files]\n", r.pkg.importPath)
	case !r.built:
		fmt.Fprintf(&b, "%v\nFAIL\t%s [build failed]\n", r.err, r.pkg.importPath)
	case r.err != nil:
		fmt.Fprintf(&b, "FAIL\t%s\t%.3fs\n", r.pkg.importPath, r.elapsed.Seconds())
	default:
		fmt.Fprintf(&b, "ok  \t%s\t%.3fs\n", r.pkg.importPath, r.elapsed.Seconds())
	}
	return b.Bytes()
}

// runBinary runs a built test binary in its package's directory, its
// output kept for the report or, streaming, written to stdout at once.
func runBinary(pk pkg, bin string, args []string, stream bool) result {
	cmd := exec.Command(bin, args...)
	cmd.Dir = pk.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if stream {
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	}
	start := time.Now()
	err := cmd.Run()
	r := result{pkg: pk, elapsed: time.Since(start), err: err, built: true, output: out.Bytes()}
	if err == nil && !hasArg(args, "-test.v") {
		// go test shows a passing package's output only with -v.
		r.output = nil
	}
	return r
}

func hasArg(args []string, name string) bool {
	for _, a := range args {
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// lane builds packages one after another and runs up to slots of the
// built ones at once, in the order given; build, run and print are
// replaceable for its tests.
type lane struct {
	slots int
	build func(pkg) (string, error)
	run   func(pkg, string) result
	print func(result)
}

// do tests pkgs and returns how many failed.
func (l *lane) do(pkgs []pkg) int {
	type built struct {
		pkg pkg
		bin string
		err error
	}
	// Buffered for every package: the builds never wait for a slot.
	ready := make(chan built, len(pkgs))
	go func() {
		defer close(ready)
		for _, pk := range pkgs {
			bin, err := l.build(pk)
			ready <- built{pk, bin, err}
		}
	}()
	results := make(chan result)
	slots := make(chan struct{}, l.slots)
	go func() {
		for b := range ready {
			switch {
			case b.err != nil:
				results <- result{pkg: b.pkg, err: b.err}
			case b.bin == "":
				results <- result{pkg: b.pkg, noTests: true}
			default:
				slots <- struct{}{}
				go func() {
					defer func() { <-slots }()
					results <- l.run(b.pkg, b.bin)
				}()
			}
		}
	}()
	failed := 0
	for range pkgs {
		r := <-results
		if r.err != nil {
			failed++
		}
		l.print(r)
	}
	return failed
}
