package ptp

import "time"

// State is the one-word verdict on this host's clock.
type State string

// States. Consumers should trust delays only while the State is StateSynced
// (or StateDisabled, where the operator chose to run without PTP).
const (
	StateSynced   State = "synced"
	StateUnsynced State = "unsynced"
	StateUnknown  State = "unknown" // ptp4l has never answered
	StateDisabled State = "disabled"
	// StateInvalid stands for a state a peer reported that is none of the
	// above (ParseState). It is never a verdict of this host's Judge; as a
	// label value it keeps what a peer sends (any length, any bytes) out of
	// the metrics, and it withholds delays as StateUnsynced does.
	StateInvalid State = "invalid"
)

// ParseState is the State a peer reported as s, or StateInvalid where s
// is none of the States a Judge gives.
func ParseState(s string) State {
	switch st := State(s); st {
	case StateSynced, StateUnsynced, StateUnknown, StateDisabled:
		return st
	}
	return StateInvalid
}

// Trusted reports whether delays measured under s can be believed: a
// synchronized clock, or PTP disabled by the operator's choice.
func (s State) Trusted() bool { return s == StateSynced || s == StateDisabled }

// Status is what ptp4l last told us, plus the verdict.
type Status struct {
	State              State
	Reachable          bool   // the last poll got every answer
	GrandmasterPresent bool   // TIME_STATUS_NP gmPresent
	GrandmasterID      string // TIME_STATUS_NP gmIdentity, pmc's text form
	PortState          string // PORT_PROPERTIES_NP portState, e.g. "SLAVE", "UNCALIBRATED"
	OffsetNS           int64  // master offset: CURRENT_DATA_SET offsetFromMaster (= TIME_STATUS_NP master_offset)
	MeanPathDelayNS    int64  // CURRENT_DATA_SET meanPathDelay
	StepsRemoved       int    // CURRENT_DATA_SET stepsRemoved
	LastOK             time.Time
	Err                string // last error, human readable; "" after a good poll

	// IngressTimeNS is TIME_STATUS_NP ingress_time: the receive time of
	// the last Sync that produced OffsetNS, in the PHC's (or, with
	// software timestamping, the system clock's) timescale. ptp4l zeroes
	// it when the port loses its master.
	IngressTimeNS int64
	// OffsetUpdated is our local time of the poll that first saw the
	// current IngressTimeNS: if it stops moving, OffsetNS is stale.
	OffsetUpdated time.Time
	Interface     string // PORT_PROPERTIES_NP interface name
	// OffsetMeasured says OffsetNS comes from this acquisition of this
	// grandmaster. ptp4l reports a stale offset (the previous master's, or
	// 0 at start) from the moment it takes a new master until its first
	// delay measurement; the checker sets this once offsetFromMaster has
	// changed since the port started measuring. See offsetTracker.
	OffsetMeasured bool

	// PHC versus system clock (ptp.phc): the device read, the offset
	// (system - PHC) and its read delay, or why it could not be read.
	PHCDevice   string
	PHCOffsetNS int64
	PHCDelayNS  int64
	PHCErr      string
}

// Judge is the sync decision, a pure function of what was polled. Synced
// needs all of:
//   - ptp4l answered within the last cfg.Grace (a failed poll holds the
//     last answer for that long);
//   - a grandmaster is present (gmPresent);
//   - the port is measuring against it: SLAVE, or UNCALIBRATED unless
//     cfg.RequireLocked (free_running ptp4l stays UNCALIBRATED forever);
//   - a Sync was received (ingress_time != 0) and a new one arrived within
//     cfg.Grace, so the offset is current;
//   - the offset was measured in this acquisition (OffsetMeasured), not
//     left over from before it;
//   - |master offset| <= cfg.OffsetLimit.
//
// ptp4l never answered => unknown; cfg.Enabled false => disabled.
func Judge(s Status, cfg Config, now time.Time) State {
	switch {
	case !cfg.Enabled:
		return StateDisabled
	case s.LastOK.IsZero():
		return StateUnknown
	case !s.Reachable && now.Sub(s.LastOK) > cfg.Grace:
		return StateUnsynced
	case !s.GrandmasterPresent:
		return StateUnsynced
	case !portMeasures(s.PortState, cfg.RequireLocked):
		// Checked besides gmPresent: a slaveOnly ptp4l that lost its
		// master goes LISTENING but keeps reporting the old grandmaster
		// with gmPresent true (seen with linuxptp 3.1.1).
		return StateUnsynced
	case s.IngressTimeNS == 0 || s.OffsetUpdated.IsZero():
		return StateUnsynced
	case now.Sub(s.OffsetUpdated) > cfg.Grace:
		return StateUnsynced
	case !s.OffsetMeasured:
		return StateUnsynced
	case absDur(s.OffsetNS) > cfg.OffsetLimit:
		return StateUnsynced
	case cfg.PHC != "" && (s.PHCErr != "" || absDur(s.PHCOffsetNS) > cfg.OffsetLimit):
		// The system clock the captures use is not known to follow the
		// PHC that ptp4l disciplines.
		return StateUnsynced
	}
	return StateSynced
}

// portMeasures: ports in these states compute an offset to a master.
func portMeasures(portState string, requireLocked bool) bool {
	switch portState {
	case "SLAVE":
		return true
	case "UNCALIBRATED":
		return !requireLocked
	}
	return false
}

func absDur(ns int64) time.Duration {
	if ns < 0 {
		if ns == -1<<63 {
			return time.Duration(1<<63 - 1)
		}
		ns = -ns
	}
	return time.Duration(ns)
}
