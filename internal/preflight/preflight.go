// Package preflight checks a daemon's configuration against the host it
// is about to run on (`--check-config`): the files it reads, its TLS
// material, its results directory, ptp4l's socket, its listen ports and
// its capture interface. Each finding names the key, its value and the
// fix; a FAIL is something the daemon would stop on, or that would leave
// it measuring nothing.
package preflight

import (
	"cmp"
	"fmt"
	"io"
	"os/user"
	"strconv"
	"strings"
)

// Level is how serious a finding is.
type Level int

// The levels, in increasing seriousness.
const (
	OK   Level = iota // checked and fine
	Warn              // the daemon runs, but something is likely wrong or degraded
	Fail              // the daemon would stop, refuse its peer, or measure nothing
)

func (l Level) String() string {
	switch l {
	case OK:
		return "OK"
	case Warn:
		return "WARN"
	default:
		return "FAIL"
	}
}

// Finding is one line of the preflight.
type Finding struct {
	Level Level
	Key   string // the configuration key, e.g. sender.tls.key
	Value string // its value
	Msg   string // what was found
	Fix   string // what to do ("" for OK)
}

func (f Finding) String() string {
	s := fmt.Sprintf("%-4s %s", f.Level, f.Key)
	if f.Value != "" {
		s += " = " + f.Value
	}
	s += ": " + f.Msg
	if f.Fix != "" {
		s += "; fix: " + f.Fix
	}
	return s
}

// Options tune the checks.
type Options struct {
	// User is the service user whose access to files and sockets is
	// checked: the units' User= (default "lds"). If it does not exist,
	// the current user is checked instead and a warning says so.
	User string
}

// Report is the findings of one preflight.
type Report struct{ Findings []Finding }

func (r *Report) add(l Level, key, value, msg, fix string) {
	r.Findings = append(r.Findings, Finding{Level: l, Key: key, Value: value, Msg: msg, Fix: fix})
}

// Count returns how many findings have level l.
func (r *Report) Count(l Level) int {
	n := 0
	for _, f := range r.Findings {
		if f.Level == l {
			n++
		}
	}
	return n
}

// Failed reports whether any finding is a FAIL.
func (r *Report) Failed() bool { return r.Count(Fail) > 0 }

// Print writes every finding, one a line, then the verdict line.
func (r *Report) Print(w io.Writer, daemon string) {
	for _, f := range r.Findings {
		fmt.Fprintln(w, f.String())
	}
	fails, warns := r.Count(Fail), r.Count(Warn)
	if fails > 0 {
		fmt.Fprintf(w, "%s would not run as configured: %d failed, %d warnings (fix the FAIL lines, then run --check-config again)\n", daemon, fails, warns)
		return
	}
	fmt.Fprintf(w, "configuration OK: %d host checks passed, %d warnings\n", r.Count(OK), warns)
}

// account is whose access the file checks judge.
type account struct {
	name string
	uid  int
	gids []int
}

// resolveUser looks the service user up; without it, the current user.
func resolveUser(r *Report, name string) account {
	name = cmp.Or(name, "lds")
	u, err := user.Lookup(name)
	if err != nil {
		cur, cerr := user.Current()
		if cerr != nil {
			r.add(Warn, "(service user)", name, "does not exist and the current user is unknown: file access not checked", "install the lds package, or useradd --system "+name)
			return account{name: "", uid: -1}
		}
		r.add(Warn, "(service user)", name, "does not exist: file access is checked for the current user "+cur.Username+" instead",
			"install the lds package (it creates user lds), or useradd --system --user-group "+name)
		u = cur
	}
	a := account{name: u.Username}
	a.uid, _ = strconv.Atoi(u.Uid)
	gids, _ := u.GroupIds()
	for _, g := range append([]string{u.Gid}, gids...) {
		if n, err := strconv.Atoi(g); err == nil {
			a.gids = append(a.gids, n)
		}
	}
	return a
}

func quoteList(s []string) string {
	q := make([]string, len(s))
	for i, x := range s {
		q[i] = strconv.Quote(x)
	}
	return strings.Join(q, ", ")
}
