package receiver

import (
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/ptp"
	"github.com/lds-net/lds/internal/wire"
	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
)

// TestSenderClockStateBounded: the clock state a sender reports becomes a
// label value only if it is one of ptp's states; anything else (900 KB of
// it, or one byte off) becomes ptp.StateInvalid, which withholds delays.
func TestSenderClockStateBounded(t *testing.T) {
	for _, tc := range []struct {
		sent string
		want ptp.State
	}{
		{"synced", "synced"}, {"unsynced", "unsynced"}, {"unknown", "unknown"}, {"disabled", "disabled"},
		{"Synced", ptp.StateInvalid}, {"", ptp.StateInvalid}, {strings.Repeat("x", 900<<10), ptp.StateInvalid},
	} {
		w := &wire.Interval{End: &ldsv1.End{Clock: &ldsv1.ClockStatus{State: tc.sent}}}
		_, meta := senderInterval(w)
		if meta.Clock.State != tc.want {
			t.Errorf("state %.20q: got %.20q, want %q", tc.sent, meta.Clock.State, tc.want)
		}
	}
}
