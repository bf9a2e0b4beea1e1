// Package testutil holds helpers shared by tests: loud skips that turn into
// failures in CI, and building captures with known truth.
package testutil

import (
	"net/netip"
	"os"
	"testing"
)

// Required reports whether CI demands the real components
// (LDS_E2E_REQUIRED=1): then a missing one is a failure, not a skip.
func Required() bool { return os.Getenv("LDS_E2E_REQUIRED") == "1" }

// SkipOrFail skips loudly, or fails under LDS_E2E_REQUIRED=1.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf("LDS_E2E_REQUIRED=1 but: "+format, args...)
	}
	t.Skipf("SKIPPED (real component unavailable): "+format, args...)
}

// RequireRoot skips or fails when not running as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(t, "needs root (network namespaces, raw sockets)")
	}
}

// MustAddr parses an IP address or fails the test.
func MustAddr(t testing.TB, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
