package devcert

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
)

// TestIssue checks that an issued certificate verifies against its CA for
// server and client use under each of its names, and not against another CA
// or for another name.
func TestIssue(t *testing.T) {
	t.Parallel()
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other CA")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue("127.0.0.1", "node1")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := func(c *CA) *x509.CertPool {
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(c.CertPEM) {
			t.Fatal("bad CA PEM")
		}
		return p
	}
	for _, tt := range []struct {
		name  string
		roots *x509.CertPool
		host  string
		usage x509.ExtKeyUsage
		ok    bool
	}{
		{"server by IP", roots(ca), "127.0.0.1", x509.ExtKeyUsageServerAuth, true},
		{"server by name", roots(ca), "node1", x509.ExtKeyUsageServerAuth, true},
		{"client", roots(ca), "", x509.ExtKeyUsageClientAuth, true},
		{"another name", roots(ca), "node2", x509.ExtKeyUsageServerAuth, false},
		{"another CA", roots(other), "127.0.0.1", x509.ExtKeyUsageServerAuth, false},
		{"code signing", roots(ca), "", x509.ExtKeyUsageCodeSigning, false},
	} {
		_, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: tt.roots, DNSName: tt.host, KeyUsages: []x509.ExtKeyUsage{tt.usage}})
		if tt.ok != (err == nil) {
			t.Errorf("%s: Verify = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

// TestIssueFiles checks that IssueFiles writes a key pair that loads, only
// for its owner, and returns the certificate in the file; a directory that
// does not exist is an error.
func TestIssueFiles(t *testing.T) {
	t.Parallel()
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	cert, err := ca.IssueFiles(certFile, keyFile, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if pair.Leaf.SerialNumber.Cmp(cert.SerialNumber) != 0 {
		t.Errorf("the file holds serial %v; IssueFiles returned %v", pair.Leaf.SerialNumber, cert.SerialNumber)
	}
	for _, f := range []string{certFile, keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s has mode %v; want 0600", filepath.Base(f), mode)
		}
	}
	if _, err := ca.IssueFiles(filepath.Join(dir, "none", "c.pem"), keyFile); err == nil {
		t.Error("IssueFiles into a missing directory: no error")
	}
}
