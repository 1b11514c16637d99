package main

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// While every slot runs a long package, the next packages are still built:
// the first run here ends only once all four are built (go test -p 1 would
// build none of them before it ended).
func TestBuildsGoOnWhileTheSlotsRun(t *testing.T) {
	pkgs := []pkg{{importPath: "a", tests: true}, {importPath: "b", tests: true}, {importPath: "c", tests: true}, {importPath: "d", tests: true}}
	var mu sync.Mutex
	built := 0
	allBuilt := make(chan struct{})
	var printed []string
	l := &lane{
		slots: 1,
		build: func(pk pkg) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			if built++; built == len(pkgs) {
				close(allBuilt)
			}
			return pk.importPath + ".test", nil
		},
		run: func(pk pkg, bin string) result {
			if pk.importPath == "a" {
				select {
				case <-allBuilt:
				case <-time.After(10 * time.Second):
					return result{pkg: pk, built: true, err: errors.New("the others were not built while a ran")}
				}
			}
			return result{pkg: pk, built: true}
		},
		print: func(r result) { printed = append(printed, string(r.report())) },
	}
	if failed := l.do(pkgs); failed != 0 {
		t.Fatalf("%d failed: %v", failed, printed)
	}
	// One slot: they ran, and were printed, in the order given.
	var order []string
	for _, p := range printed {
		order = append(order, strings.Fields(p)[1])
	}
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(order, want) {
		t.Fatalf("printed %v, want %v", order, want)
	}
}

// Never more than -p binaries run at once, and a failed build or run is
// counted and reported as go test does.
func TestSlotsAndFailures(t *testing.T) {
	pkgs := []pkg{{importPath: "ok1", tests: true}, {importPath: "broken", tests: true}, {importPath: "none"},
		{importPath: "fails", tests: true}, {importPath: "ok2", tests: true}, {importPath: "ok3", tests: true}}
	var mu sync.Mutex
	running, most := 0, 0
	twoAtOnce := make(chan struct{})
	var printed []string
	l := &lane{
		slots: 2,
		build: func(pk pkg) (string, error) {
			switch {
			case pk.importPath == "broken":
				return "", errors.New("undefined: x")
			case !pk.tests:
				return "", nil
			}
			return pk.importPath + ".test", nil
		},
		run: func(pk pkg, bin string) result {
			mu.Lock()
			running++
			if most = max(most, running); running == 2 && most == 2 {
				select {
				case <-twoAtOnce:
				default:
					close(twoAtOnce)
				}
			}
			mu.Unlock()
			// The first holds its slot until a second runs beside it.
			select {
			case <-twoAtOnce:
			case <-time.After(10 * time.Second):
			}
			mu.Lock()
			running--
			mu.Unlock()
			r := result{pkg: pk, built: true, output: []byte("--- PASS: TestX\n")}
			if pk.importPath == "fails" {
				r.err, r.output = errors.New("exit status 1"), []byte("--- FAIL: TestX\n")
			}
			return r
		},
		print: func(r result) { printed = append(printed, string(r.report())) },
	}
	if failed := l.do(pkgs); failed != 2 {
		t.Errorf("%d failed, want 2 (the build and the run)", failed)
	}
	if most != 2 {
		t.Errorf("at most %d ran at once, want 2", most)
	}
	all := strings.Join(printed, "")
	for _, want := range []string{"FAIL\tbroken [build failed]", "undefined: x", "?   \tnone\t[no test files]",
		"--- FAIL: TestX\nFAIL\tfails\t", "ok  \tok1\t", "ok  \tok3\t"} {
		if !strings.Contains(all, want) {
			t.Errorf("output lacks %q:\n%s", want, all)
		}
	}
}

func TestBinaryFlags(t *testing.T) {
	got, err := binaryFlags(strings.Fields("-count=1 -v -timeout 40m -parallel 8 -run TestA|TestB"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-test.paniconexit0", "-test.count=1", "-test.v", "-test.timeout", "40m", "-test.parallel", "8", "-test.run", "TestA|TestB"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, bad := range []string{"-race", "-vet=off", "-p 2", "-timeout", "v"} {
		if _, err := binaryFlags(strings.Fields(bad)); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

func TestBinaryNames(t *testing.T) {
	pkgs := []pkg{{importPath: "m/test/pin"}, {importPath: "m/controllers/pin"}, {importPath: "m/x/controllers/pin"}, {importPath: "m/test/safety"}}
	nameBinaries(pkgs)
	var got []string
	for _, p := range pkgs {
		got = append(got, p.binary)
	}
	if want := []string{"pin.test", "controllers-pin.test", "x-controllers-pin.test", "safety.test"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
