package preflight

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// Access bits, as in a mode's rwx triplets.
const (
	accR = 4
	accW = 2
	accX = 1
)

// owner returns "user:group" of a file's stat.
func owner(fi fs.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "?"
	}
	u, g := strconv.Itoa(int(st.Uid)), strconv.Itoa(int(st.Gid))
	if x, err := user.LookupId(u); err == nil {
		u = x.Username
	}
	if x, err := user.LookupGroupId(g); err == nil {
		g = x.Name
	}
	return u + ":" + g
}

// allowed reports whether a has access bits want on fi by its mode (root
// has every read and write; execute as the mode says, for directories).
func (a account) allowed(fi fs.FileInfo, want uint32) bool {
	if a.uid == 0 {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || a.uid < 0 {
		return true
	}
	perm := uint32(fi.Mode().Perm())
	var bits uint32
	switch {
	case int(st.Uid) == a.uid:
		bits = perm >> 6
	case slices.Contains(a.gids, int(st.Gid)):
		bits = perm >> 3
	default:
		bits = perm
	}
	return bits&want == want
}

// reach checks that a may traverse every directory above path and has
// want on path itself. It returns the first path that stops it, with why.
func (a account) reach(path string, want uint32) (blocker string, why string) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path, err.Error()
	}
	dirs := []string{}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == "/" || d == "." {
			break
		}
	}
	slices.Reverse(dirs)
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil {
			return d, err.Error()
		}
		if !a.allowed(fi, accX) {
			return d, fmt.Sprintf("directory %s (%s %s) may not be entered", d, fi.Mode().Perm(), owner(fi))
		}
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return abs, err.Error()
	}
	if !a.allowed(fi, want) {
		return abs, fmt.Sprintf("%s %s", fi.Mode().Perm(), owner(fi))
	}
	return "", ""
}

// accessFix is the command that gives group lds (the service user's
// group) access want to path.
func (a account) accessFix(blocker, path string, want uint32) string {
	if blocker != path {
		return fmt.Sprintf("chgrp %s %s && chmod g+x %s", a.group(), blocker, blocker)
	}
	mode := "0640"
	switch {
	case want&accW != 0 && want&accX != 0:
		mode = "0750"
		return fmt.Sprintf("chown %s:%s %s && chmod %s %s", a.name, a.group(), path, mode, path)
	case want&accW != 0:
		return fmt.Sprintf("chown %s:%s %s && chmod 0640 %s", a.name, a.group(), path, path)
	}
	return fmt.Sprintf("chgrp %s %s && chmod %s %s", a.group(), path, mode, path)
}

func (a account) group() string {
	if a.name == "" {
		return "lds"
	}
	if u, err := user.Lookup(a.name); err == nil {
		if g, err := user.LookupGroupId(u.Gid); err == nil {
			return g.Name
		}
	}
	return a.name
}

// checkFile checks a file the daemon reads: it exists, is a regular file
// (or, with dev, a device) and the service user may read it. A secret
// (a private key, a password) readable by every user is a warning.
func checkFile(r *Report, a account, key, path string, secret bool) bool {
	fi, err := os.Stat(path)
	if err != nil {
		fix := "create it, or set " + key + " to the file's path"
		if errors.Is(err, fs.ErrPermission) {
			fix = "make its directories searchable"
		}
		r.add(Fail, key, path, fmt.Sprintf("cannot be read: %v", err), fix)
		return false
	}
	if !fi.Mode().IsRegular() {
		r.add(Fail, key, path, "is not a regular file ("+fi.Mode().Type().String()+")", "set "+key+" to a file")
		return false
	}
	if blocker, why := a.reach(path, accR); blocker != "" {
		r.add(Fail, key, path, fmt.Sprintf("not readable by user %s: %s", a.name, why), a.accessFix(blocker, path, accR))
		return false
	}
	f, err := os.Open(path) // what the mode bits do not show: ACLs, LSMs, read errors
	if err != nil {
		if errors.Is(err, fs.ErrPermission) && os.Geteuid() != 0 {
			r.add(Warn, key, path, fmt.Sprintf("user %s may read it, this user (uid %d) may not, so its content is not checked", a.name, os.Geteuid()),
				"run --check-config as root to check it fully")
			return false
		}
		r.add(Fail, key, path, "cannot be opened: "+err.Error(), "check the file")
		return false
	}
	_ = f.Close()
	if secret && fi.Mode().Perm()&0o004 != 0 {
		r.add(Warn, key, path, fmt.Sprintf("a secret readable by every user of this host (%s %s)", fi.Mode().Perm(), owner(fi)),
			fmt.Sprintf("chgrp %s %s && chmod 0640 %s", a.group(), path, path))
		return true
	}
	r.add(OK, key, path, "readable by user "+a.name, "")
	return true
}

// checkDirWritable checks that the service user may create files in dir.
func checkDirWritable(r *Report, a account, key, value, dir string) bool {
	fi, err := os.Stat(dir)
	if err != nil {
		r.add(Fail, key, value, fmt.Sprintf("directory %s: %v", dir, err),
			fmt.Sprintf("install -d -o %s -g %s -m 0750 %s", a.name, a.group(), dir))
		return false
	}
	if !fi.IsDir() {
		r.add(Fail, key, value, dir+" is not a directory", "set "+key+" to a file in a directory")
		return false
	}
	if blocker, why := a.reach(dir, accW|accX); blocker != "" {
		r.add(Fail, key, value, fmt.Sprintf("directory %s is not writable by user %s: %s", dir, a.name, why), a.accessFix(blocker, dir, accW|accX))
		return false
	}
	return true
}
