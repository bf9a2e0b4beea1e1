package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lds-net/lds/test/testutil"
)

// TestPackage builds the Debian package with `make deb` and checks it
// without installing it: lintian reports no error, /etc/lds/*.yaml are
// conffiles, the units' Documentation= names a file the package holds,
// and the maintainer scripts start and enable nothing. (Installing it on
// booted hosts is TestTwoHostDeployment.)
func TestPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPED in -short mode: builds the package (about a minute)")
	}
	for _, tool := range []string{"make", "dpkg-deb", "lintian"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, "%s not found (apt-get install -y make dpkg lintian)", tool)
		}
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("make", "-C", repo, "deb").CombinedOutput(); err != nil {
		t.Fatalf("make deb: %v\n%s", err, out)
	}
	deb := builtDeb(t, repo)
	if !regexp.MustCompile(`/lds_[0-9][^_]*-1_[a-z0-9]+\.deb$`).MatchString(deb) {
		t.Errorf("package file %s is not dist/lds_<version>-1_<arch>.deb", deb)
	}
	out, _ := exec.Command("lintian", "--tag-display-limit", "0", deb).CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "E: ") {
			t.Errorf("lintian error: %s", l)
		}
	}
	t.Logf("lintian %s:\n%s", filepath.Base(deb), out)

	dir := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-R", deb, dir).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -R: %v\n%s", err, out)
	}
	conffiles, err := os.ReadFile(filepath.Join(dir, "DEBIAN", "conffiles"))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(conffiles))
	slices.Sort(got)
	if want := []string{"/etc/lds/receiver.yaml", "/etc/lds/sender.yaml"}; !slices.Equal(got, want) {
		t.Errorf("conffiles %v, want %v", got, want)
	}
	for _, unit := range []string{"lds-sender.service", "lds-receiver.service"} {
		b, err := os.ReadFile(filepath.Join(dir, "lib/systemd/system", unit))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^Documentation=file://(\S+)$`).FindSubmatch(b)
		if m == nil {
			t.Errorf("%s has no Documentation=file://", unit)
		} else if _, err := os.Stat(filepath.Join(dir, string(m[1]))); err != nil {
			t.Errorf("%s: Documentation=%s is not in the package: %v", unit, m[1], err)
		}
		if !strings.Contains(string(b), "ExecStart=/usr/bin/") || strings.Contains(string(b), "/usr/local/") {
			t.Errorf("%s does not run the package's /usr/bin binary:\n%s", unit, b)
		}
	}
	for _, script := range []string{"postinst", "prerm", "postrm"} {
		b, err := os.ReadFile(filepath.Join(dir, "DEBIAN", script))
		if err != nil {
			t.Fatal(err)
		}
		for _, forbidden := range []string{"enable", "start ", "restart"} {
			if regexp.MustCompile(`(?m)^[^#]*(systemctl|deb-systemd-invoke|deb-systemd-helper)\b[^#\n]*\b` + forbidden).Match(b) {
				t.Errorf("%s runs %q on a service: installing must start and enable nothing", script, strings.TrimSpace(forbidden))
			}
		}
	}
	for _, f := range []string{"usr/bin/lds-sender", "usr/bin/lds-receiver", "usr/bin/ldsctl", "usr/bin/lds-linkem", "lib/systemd/system/ptp4l@.service.d/lds.conf",
		"usr/lib/lds/lds-ptp4l-socket", "lib/udev/rules.d/60-lds-ptp.rules", "usr/share/doc/lds/docs/config.md", "usr/share/doc/lds/copyright"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the package lacks /%s", f)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "lib/systemd/system/ptp4l@.service.d/lds.conf")); !strings.Contains(string(b), "ExecStartPost=-/usr/lib/lds/lds-ptp4l-socket") {
		t.Errorf("the ptp4l drop-in does not run the packaged /usr/lib/lds/lds-ptp4l-socket:\n%s", b)
	}
}
