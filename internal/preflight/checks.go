package preflight

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/wire"
)

// Sender checks lds-sender's validated configuration against this host.
func Sender(cfg *config.Sender, opt Options) *Report {
	r, a := start(opt, &cfg.Common)
	s := cfg.Sender
	if s.TLS.Plaintext {
		plaintext(r, "sender", s.Receiver, "no TLS towards the loopback receiver "+s.Receiver,
			"refused towards "+s.Receiver+", which is not a loopback address (the sender would stop)", "sender.tls.ca")
	} else if leaf := tlsPair(r, a, "sender.tls", s.TLS.Cert, s.TLS.Key, s.TLS.CA, x509.ExtKeyUsageClientAuth); leaf != nil {
		senderID(r, leaf, s.ID, s.TLS.Cert)
	}
	resolveReceiver(r, s.Receiver)
	return r
}

// senderID checks that the client certificate (certPath, leaf) names
// sender.id, as the receiver requires.
func senderID(r *Report, leaf *x509.Certificate, id, certPath string) {
	names := wire.CertNames(leaf)
	if containsName(names, id) {
		r.add(OK, "sender.id", id, "named by the client certificate "+certPath, "")
		return
	}
	r.add(Fail, "sender.id", id, fmt.Sprintf("not a name of the client certificate %s (CN and DNS SANs: %s): the receiver refuses this sender", certPath, quoteList(names)),
		"set sender.id to one of those names, or issue the certificate with CN="+id)
}

// Receiver checks lds-receiver's validated configuration against this host.
func Receiver(cfg *config.Receiver, opt Options) *Report {
	r, a := start(opt, &cfg.Common)
	rc := cfg.Receiver
	if rc.TLS.Plaintext {
		plaintext(r, "receiver", rc.Listen, "senders are served without TLS on loopback "+rc.Listen,
			"refused on "+rc.Listen+", which is not a loopback address (the receiver would stop)", "receiver.tls.client_ca")
	} else {
		tlsPair(r, a, "receiver.tls", rc.TLS.Cert, rc.TLS.Key, rc.TLS.ClientCA, x509.ExtKeyUsageServerAuth)
	}
	checkPort(r, "receiver.listen", rc.Listen)
	if len(rc.Senders) == 0 {
		r.add(Warn, "receiver.senders", "[]", "no sender listed: whichever sender id connects first is accepted", "list each sender's sender.id, e.g. senders: [{id: edge-a}]")
	}
	if rc.ResultsFile != "" {
		outputFile(r, a, "receiver.results_file", rc.ResultsFile)
	}
	if rc.LostFile != "" {
		outputFile(r, a, "receiver.lost_file", rc.LostFile)
	}
	exportFiles(r, a, cfg)
	return r
}

// plaintext checks <role>.tls.plaintext: allowed (a warning, loopback
// says what goes without TLS) where addr is a loopback address, refused
// (refused says what the daemon would do) elsewhere, with the fix naming
// the role's certificate keys and its CA key ca.
func plaintext(r *Report, role, addr, loopback, refused, ca string) {
	key := role + ".tls.plaintext"
	if wire.IsLoopback(addr) {
		r.add(Warn, key, "true", loopback, "")
		return
	}
	r.add(Fail, key, "true", refused,
		"set "+role+".tls.cert, "+role+".tls.key and "+ca+" and remove "+key+" (README, \"Certificates\")")
}

// start begins a daemon's report: the account it runs as and the checks
// of what both daemons share.
func start(opt Options, c *config.Common) (*Report, account) {
	r := &Report{}
	a := resolveUser(r, opt.User)
	common(r, a, c)
	return r, a
}

// common is what both daemons share: the seed, PTP, metrics and capture.
func common(r *Report, a account, c *config.Common) {
	if msg := config.WeakSeed(c.Sketch.Seed); msg != "" {
		r.add(Warn, "sketch.seed", "(set, not shown)", msg, "set sketch.seed at both ends to the output of `openssl rand -hex 16`")
	}
	ptpChecks(r, a, c)
	if c.Metrics.Listen != "" {
		checkPort(r, "metrics.listen", c.Metrics.Listen)
	}
	if c.Metrics.WebConfig != "" {
		checkFile(r, a, "metrics.web_config", c.Metrics.WebConfig, true)
	}
	captureChecks(r, c)
}

// tlsPair checks a certificate, its key and the CA file: each readable,
// the certificate matching the key, valid now, and issued by the CA.
func tlsPair(r *Report, a account, prefix, certPath, keyPath, caPath string, usage x509.ExtKeyUsage) *x509.Certificate {
	caKey := prefix + ".ca"
	if usage == x509.ExtKeyUsageServerAuth {
		caKey = prefix + ".client_ca"
	}
	okCert := checkFile(r, a, prefix+".cert", certPath, false)
	okKey := checkFile(r, a, prefix+".key", keyPath, true)
	okCA := checkFile(r, a, caKey, caPath, false)
	if !okCert || !okKey {
		return nil
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		r.add(Fail, prefix+".cert", certPath, "does not go with "+prefix+".key "+keyPath+": "+err.Error(),
			"install the key the certificate was issued for (openssl x509 -noout -pubkey -in CERT and openssl pkey -pubout -in KEY must print the same)")
		return nil
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			r.add(Fail, prefix+".cert", certPath, "unparsable: "+err.Error(), "reissue the certificate")
			return nil
		}
	}
	now := time.Now()
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		r.add(Fail, prefix+".cert", certPath, fmt.Sprintf("not valid now (valid %s to %s)", leaf.NotBefore.UTC().Format(time.DateOnly), leaf.NotAfter.UTC().Format(time.DateOnly)),
			"reissue the certificate (and check the host's clock)")
		return leaf
	}
	if !okCA {
		return leaf
	}
	pem, _ := os.ReadFile(caPath)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		r.add(Fail, caKey, caPath, "holds no PEM certificate", "set "+caKey+" to the CA certificate (PEM)")
		return leaf
	}
	inter := x509.NewCertPool()
	for _, c := range pair.Certificate[1:] {
		if ic, err := x509.ParseCertificate(c); err == nil {
			inter.AddCert(ic)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		r.add(Warn, prefix+".cert", certPath, "does not chain to "+caKey+" "+caPath+": "+err.Error()+
			" (fine only if the peer verifies it with another CA)", "issue it from the CA in "+caPath+", as README \"Certificates\" does")
		return leaf
	}
	r.add(OK, prefix+".cert", certPath, "matches "+prefix+".key and chains to "+caPath, "")
	return leaf
}

func containsName(names []string, id string) bool {
	for _, n := range names {
		if n == id {
			return true
		}
	}
	return false
}

// resolveReceiver checks that sender.receiver's host resolves.
func resolveReceiver(r *Report, hostport string) {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		r.add(Fail, "sender.receiver", hostport, "not host:port: "+err.Error(), "set sender.receiver to the receiver's name:7420")
		return
	}
	if net.ParseIP(host) != nil {
		return
	}
	ctx, cancel := contextTimeout(3 * time.Second)
	defer cancel()
	if _, err := net.DefaultResolver.LookupHost(ctx, host); err != nil {
		r.add(Warn, "sender.receiver", hostport, "the name does not resolve now: "+err.Error()+" (the sender keeps retrying)", "fix DNS or /etc/hosts for "+host)
		return
	}
	r.add(OK, "sender.receiver", hostport, "resolves", "")
}

// checkPort checks that a listen address is free to bind.
func checkPort(r *Report, key, addr string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fix := "set " + key + " to a free host:port"
		if errors.Is(err, syscall.EADDRINUSE) {
			_, port, _ := net.SplitHostPort(addr)
			fix = "stop what listens there (ss -ltnp 'sport = :" + port + "'; a running lds daemon holds its own ports), or " + fix
		}
		r.add(Fail, key, addr, "cannot listen: "+err.Error(), fix)
		return
	}
	_ = l.Close()
	r.add(OK, key, addr, "free to listen on", "")
}

// outputFile checks the directory of a file the receiver writes (the
// results file, the lost-packet file) and the unit's sandbox.
func outputFile(r *Report, a account, key, path string) {
	dir := filepath.Dir(path)
	if !checkDirWritable(r, a, key, path, dir) {
		return
	}
	if fi, err := os.Stat(path); err == nil {
		if blocker, why := a.reach(path, accW); blocker != "" {
			r.add(Fail, key, path, fmt.Sprintf("exists and is not writable by user %s: %s", a.name, why), fmt.Sprintf("chown %s %s", a.name, path))
			return
		}
		_ = fi
	}
	if abs, _ := filepath.Abs(dir); abs != "/var/lib/lds" && !strings.HasPrefix(abs, "/var/lib/lds/") {
		r.add(Warn, key, path, "outside /var/lib/lds: lds-receiver.service (ProtectSystem=strict) may write only there",
			"use a path under /var/lib/lds/, or `systemctl edit lds-receiver` and add ReadWritePaths="+dir)
		return
	}
	r.add(OK, key, path, "directory writable by user "+a.name, "")
}

// exportFiles checks the files the Kafka export reads.
func exportFiles(r *Report, a account, cfg *config.Receiver) {
	k := cfg.Export.Kafka
	if len(k.Brokers) == 0 {
		return
	}
	if k.TLS.Enabled {
		if k.TLS.CA != "" {
			checkFile(r, a, "export.kafka.tls.ca", k.TLS.CA, false)
		}
		if k.TLS.Cert != "" {
			checkFile(r, a, "export.kafka.tls.cert", k.TLS.Cert, false)
		}
		if k.TLS.Key != "" {
			checkFile(r, a, "export.kafka.tls.key", k.TLS.Key, true)
		}
	}
	if k.SASL.PasswordFile != "" {
		checkFile(r, a, "export.kafka.sasl.password_file", k.SASL.PasswordFile, true)
	}
}

// ptpChecks checks ptp4l's management socket and the PHC device.
func ptpChecks(r *Report, a account, c *config.Common) {
	p := c.PTP
	if !p.Enabled {
		r.add(Warn, "ptp.enabled", "false", "delays are published without checking either clock (a trial setup; one-way delays are only as good as the clocks)",
			"run ptp4l on both hosts and set ptp.enabled: true (README, \"Clocks\")")
		return
	}
	fi, err := os.Stat(p.Socket)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.add(Warn, "ptp.socket", p.Socket, "does not exist: ptp4l is not running here (delays are withheld until it is)",
			"start ptp4l (systemctl enable --now ptp4l@IFACE) with uds_address "+p.Socket)
		return
	case err != nil:
		r.add(Fail, "ptp.socket", p.Socket, err.Error(), "make the socket's directory searchable by user "+a.name)
		return
	case fi.Mode().Type() != fs.ModeSocket:
		r.add(Fail, "ptp.socket", p.Socket, "is not a socket ("+fi.Mode().Type().String()+")", "set ptp.socket to ptp4l's uds_address")
		return
	}
	if blocker, why := a.reach(p.Socket, accR|accW); blocker != "" {
		r.add(Fail, "ptp.socket", p.Socket, fmt.Sprintf("user %s may not use it (%s): every delay would be withheld", a.name, why),
			"install the ptp4l@.service drop-in (the lds package has it) and restart ptp4l@IFACE, or chgrp "+a.group()+" "+p.Socket+" && chmod g+rw "+p.Socket+" (docs/ptp.md, \"Permissions\")")
		return
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: p.Socket, Net: "unixgram"})
	if err != nil {
		r.add(Warn, "ptp.socket", p.Socket, "nothing answers on it: "+err.Error()+" (a socket left by a stopped ptp4l; delays are withheld until ptp4l runs)",
			"start ptp4l (systemctl restart ptp4l@IFACE)")
		return
	}
	_ = conn.Close()
	r.add(OK, "ptp.socket", p.Socket, "ptp4l's socket is reachable and usable by user "+a.name, "")
	if strings.HasPrefix(p.PHC, "/") {
		if dfi, err := os.Stat(p.PHC); err != nil {
			r.add(Fail, "ptp.phc", p.PHC, err.Error(), "set ptp.phc to the PTP clock device (ls /dev/ptp*), or auto")
		} else if blocker, why := a.reach(p.PHC, accR); blocker != "" {
			r.add(Fail, "ptp.phc", p.PHC, fmt.Sprintf("not readable by user %s: %s %s", a.name, why, owner(dfi)),
				"install the udev rule 60-lds-ptp.rules (the lds package has it) and run udevadm trigger --subsystem-match=ptp")
		} else {
			r.add(Warn, "ptp.phc", p.PHC, "readable; the units hide devices (PrivateDevices=yes)",
				"install the drop-in /usr/share/doc/lds/examples/lds-phc.conf as /etc/systemd/system/lds-<role>.service.d/phc.conf (docs/ptp.md)")
		}
	}
}
