package wire

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// NonceBytes is the length of the Challenge and Hello nonces.
const NonceBytes = 32

// seedProofLabel separates the seed proof from any other use of the seed.
const seedProofLabel = "lds-seed-proof/v2"

// SeedProof is what Hello.seed_proof must hold: HMAC-SHA256 keyed with the
// shared seed over the label, a zero byte, the receiver's challenge nonce,
// the sender's nonce and the sender id. The receiver computes the same with
// its own seed and compares in constant time. Both nonces are fresh per
// stream, so a proof is worth nothing on another stream, and the receiver
// answers a mismatch with "sketch.seed differs" and nothing else: a sender
// that does not hold the seed learns only that its guess was wrong, one
// guess per stream, with no value it could test further guesses against
// offline (an unkeyed digest of the seed would allow exactly that).
func SeedProof(seed string, challenge, nonce []byte, senderID string) []byte {
	m := hmac.New(sha256.New, []byte(seed))
	m.Write([]byte(seedProofLabel))
	m.Write([]byte{0})
	m.Write(challenge)
	m.Write(nonce)
	m.Write([]byte(senderID))
	return m.Sum(nil)
}

func newNonce() []byte {
	b := make([]byte, NonceBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go >= 1.24)
	return b
}

// peerCertificate returns the verified client certificate of the stream's
// connection, or nil on a plaintext (loopback) connection.
func peerCertificate(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return ti.State.VerifiedChains[0][0]
}

// CertNames are the names a certificate vouches for as sender ids: its
// subject CN and its DNS subjectAltNames.
func CertNames(c *x509.Certificate) []string {
	var names []string
	if c.Subject.CommonName != "" {
		names = append(names, c.Subject.CommonName)
	}
	return append(names, c.DNSNames...)
}

// checkIdentity refuses a sender id its client certificate does not name.
func checkIdentity(cert *x509.Certificate, id string) error {
	if cert == nil {
		return nil // plaintext: loopback only, no identity to bind
	}
	if c := cert.Subject.CommonName; c == id || slices.Contains(cert.DNSNames, id) {
		return nil
	}
	return fmt.Errorf("sender id %q is not a name of its client certificate (CN %q, DNS SANs [%s]): "+
		"set sender.id to the certificate's CN or one of its DNS subjectAltNames, or issue a certificate whose CN or DNS SAN is %q",
		id, cert.Subject.CommonName, strings.Join(cert.DNSNames, ", "), id)
}
