// Package systemd holds the unit files; this test checks them with
// systemd-analyze against freshly built binaries.
package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/testutil"
)

func TestUnitsVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testutil.SkipOrFail(t, "%s", "systemd-analyze not installed (Debian package systemd)")
	}
	dir := t.TempDir()
	for _, name := range []string{"lds-sender", "lds-receiver"} {
		out, err := exec.Command("go", "build", "-o", dir, "../../cmd/"+name).CombinedOutput()
		if err != nil {
			t.Fatalf("building %s: %v\n%s", name, err, out)
		}
		unit, err := os.ReadFile(name + ".service")
		if err != nil {
			t.Fatal(err)
		}
		text := string(unit)
		for _, must := range []string{"AmbientCapabilities=CAP_NET_RAW\n", "NoNewPrivileges=yes", "ProtectSystem=strict",
			"RestrictAddressFamilies=AF_PACKET AF_NETLINK AF_UNIX AF_INET AF_INET6", "Restart=on-failure", "User=lds"} {
			if !strings.Contains(text, must) {
				t.Errorf("%s.service lacks %q", name, must)
			}
		}
		text = strings.ReplaceAll(text, "/usr/local/bin/"+name, filepath.Join(dir, name))
		p := filepath.Join(dir, name+".service")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err = exec.Command(sa, "verify", p).CombinedOutput()
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify %s.service: %v\n%s", name, err, out)
		}
	}
}
