package ptp

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/facebook/time/phc"
)

// readPHC fills the PHC-versus-system fields when ptp.phc is set. It is
// called with c.mu held, after a good poll (Status.Interface is known).
func (c *Checker) readPHC(st *Status) {
	if c.cfg.PHC == "" {
		return
	}
	st.PHCDevice, st.PHCOffsetNS, st.PHCDelayNS, st.PHCErr = "", 0, 0, ""
	dev := c.cfg.PHC
	if dev == "auto" {
		d, err := phc.IfaceToPHCDevice(st.Interface)
		if err != nil {
			st.PHCErr = fmt.Sprintf("ptp.phc auto: interface %q of ptp4l has no PHC: %v (software timestamping? set ptp.phc to \"\")", st.Interface, err)
			return
		}
		dev = d
	}
	st.PHCDevice = dev
	// PTP_SYS_OFFSET_EXTENDED: the system clock read right before and
	// after the PHC, the best of several samples (as phc2sys does).
	res, err := phc.TimeAndOffsetFromDevice(dev, phc.MethodIoctlSysOffsetExtended)
	if err != nil {
		st.PHCErr = fmt.Sprintf("ptp.phc: reading %s: %v", dev, err)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			// The shipped units hide /dev/ptp* (PrivateDevices=yes), and
			// Debian makes the devices root-only.
			st.PHCErr += " (under the lds units: install the drop-in deploy/systemd/lds-phc.conf and the udev rule deploy/udev/60-lds-ptp.rules, docs/ptp.md)"
		}
		return
	}
	st.PHCOffsetNS, st.PHCDelayNS = res.Offset.Nanoseconds(), res.Delay.Nanoseconds()
}
