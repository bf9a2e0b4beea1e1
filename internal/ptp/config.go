// Package ptp reports whether this host's clock is PTP-synchronised, by
// polling ptp4l's management socket (unix datagram) with the management
// client of github.com/facebook/time. Both lds daemons need their clocks
// within a bound of a common grandmaster, or one-way delays are biased by
// the offset between them; this package turns ptp4l's view into one State.
package ptp

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config configures the checker. Keys live under "ptp:" in the daemons'
// YAML files.
type Config struct {
	Enabled      bool          `yaml:"enabled"`       // false = run without PTP, Status.State "disabled"
	Socket       string        `yaml:"socket"`        // ptp4l uds_address
	PollInterval time.Duration `yaml:"poll_interval"` // time between polls
	Timeout      time.Duration `yaml:"timeout"`       // per management request
	OffsetLimit  time.Duration `yaml:"offset_limit"`  // |master offset| above this => unsynced
	Grace        time.Duration `yaml:"grace"`         // unreachable (or no new Sync) longer than this => unsynced
	// Domain is the PTP domainNumber put in management requests; it must
	// match ptp4l's domainNumber (pmc -d).
	Domain uint8 `yaml:"domain"`
	// RequireLocked counts only the SLAVE port state as synced. By default
	// UNCALIBRATED is accepted too, because with free_running ptp4l never
	// leaves it (see docs/ptp.md); set this where ptp4l disciplines the clock.
	RequireLocked bool `yaml:"require_locked"`
	// PHC checks the system clock against the PTP hardware clock ptp4l
	// disciplines (kept in step by phc2sys): "" = off, "auto" = the PHC
	// of the interface ptp4l reports, or a device path such as /dev/ptp0.
	// Captures are stamped with the system clock (or the NIC), so a PHC
	// that is synced while the system clock drifts would still bias
	// delays: |PHC - system| above offset_limit counts as unsynced.
	PHC string `yaml:"phc"`
	// ClientDir is where the checker binds its own reply socket (ptp4l
	// answers to the requester's address, so ptp4l must be able to reach
	// it: not under a unit's PrivateTmp). "" = $RUNTIME_DIRECTORY (set by
	// systemd's RuntimeDirectory=; its first entry), else $TMPDIR.
	ClientDir string `yaml:"client_dir"`
}

// DefaultConfig returns the defaults documented in docs/ptp.md.
//
// OffsetLimit is 100µs: an order of magnitude below the 1 ms clock guard
// that interval boundary assignment assumes (docs/DESIGN.md, "2. Packet →
// interval"), so a "synced" clock never endangers boundaries, and well above the few-µs jitter of
// software-timestamped PTP on a loaded host, so the state does not flap.
// The exact offset is exported as a metric; the limit is an alarm, not an
// accuracy target.
func DefaultConfig() Config {
	return Config{
		Enabled:      true,
		Socket:       "/var/run/ptp4l",
		PollInterval: time.Second,
		Timeout:      500 * time.Millisecond,
		OffsetLimit:  100 * time.Microsecond,
		Grace:        5 * time.Second,
	}
}

// maxSunPath is the usable length of a unix socket path on Linux (108 - NUL).
const maxSunPath = 107

// Validate reports every invalid key, each error naming its key.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil // nothing else is used
	}
	var errs []error
	if c.Socket == "" {
		errs = append(errs, errors.New("ptp.socket: must be set to ptp4l's uds_address (default /var/run/ptp4l)"))
	} else if len(c.Socket) > maxSunPath {
		errs = append(errs, fmt.Errorf("ptp.socket: path is %d bytes, a unix socket path may have at most %d", len(c.Socket), maxSunPath))
	}
	if c.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("ptp.poll_interval: must be > 0, got %s", c.PollInterval))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("ptp.timeout: must be > 0, got %s", c.Timeout))
	}
	if c.OffsetLimit <= 0 {
		errs = append(errs, fmt.Errorf("ptp.offset_limit: must be > 0, got %s", c.OffsetLimit))
	}
	if c.Grace <= 0 {
		errs = append(errs, fmt.Errorf("ptp.grace: must be > 0, got %s", c.Grace))
	} else if c.PollInterval > 0 && c.Grace < c.PollInterval {
		// A grace shorter than the poll interval would mark every gap
		// between two successful polls as an outage.
		errs = append(errs, fmt.Errorf("ptp.grace: must be >= ptp.poll_interval (%s), got %s", c.PollInterval, c.Grace))
	}
	// The client socket is <client_dir>/lds-ptp-<up to 10 digits>/c.sock.
	if n := len(c.ClientDir) + len("/lds-ptp-0123456789/c.sock"); c.ClientDir != "" && n > maxSunPath {
		errs = append(errs, fmt.Errorf("ptp.client_dir: %q makes a client socket path of %d bytes, a unix socket path may have at most %d: choose a shorter directory", c.ClientDir, n, maxSunPath))
	}
	return errors.Join(errs...)
}

// clientDir is the directory the checker's reply socket goes in:
// ptp.client_dir, else systemd's $RUNTIME_DIRECTORY (the first of its
// colon-separated entries), else "" (os.MkdirTemp's default, $TMPDIR).
func clientDir(configured string, getenv func(string) string) string {
	if configured != "" {
		return configured
	}
	rd, _, _ := strings.Cut(getenv("RUNTIME_DIRECTORY"), ":")
	return rd
}
