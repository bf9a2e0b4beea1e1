package api

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestStrictQuery: malformed query strings, unknown, repeated or empty
// parameters, and floods of parameters are refused with 400 naming the
// parameter, never answered with unfiltered data; well-formed ones are
// answered as written.
func TestStrictQuery(t *testing.T) {
	h := testStore().Handler()
	many := func(pair string, n int) string { return strings.TrimSuffix(strings.Repeat(pair+"&", n), "&") }
	bad := []struct {
		target string
		param  string
	}{
		{"/api/v1/flows?sender=nosuch;x=1", "sender"},
		{"/api/v1/flows?sender=a;sort=delay", "sender"},
		{"/api/v1/flows?limit=10;sort=delay", "limit"},
		{"/api/v1/flows?%zz", "%zz"},
		{"/api/v1/flows?%zz=1", "%zz"},
		{"/api/v1/flows?sender=%zz", "sender"},
		{"/api/v1/flows?sender=a%", "sender"},
		{"/api/v1/flows?sender=a%2", "sender"},
		{"/api/v1/flows?sender", "sender"},
		{"/api/v1/flows?sender=", "sender"},
		{"/api/v1/flows?interval=", "interval"},
		{"/api/v1/flows?Sender=a", "Sender"},
		{"/api/v1/flows?sender%3Da", "sender=a"},
		{"/api/v1/flows?=a", `""`},
		{"/api/v1/flows?sender=a&sender=a", "sender"},
		{"/api/v1/flows?sender=a&sender=b", "sender"},
		{"/api/v1/links?sender=a&limit=3", "limit"},
		{"/api/v1/intervals?sender=a&sender=a", "sender"},
		{"/api/v1/lost?kind=lost;sender=a", "kind"},
		{"/api/v1/lost?kind=extra&kind=lost", "kind"},
		{"/api/v1/lost?kind=", "kind"},
		{"/api/v1/lost?kind=%zz", "kind"},
		{"/api/v1/lost?sort=loss", "sort"},
		{"/api/v1/lost?kind=late", "kind"},
		{"/api/v1/lost?" + many("kind=lost", 10_001), "kind"},
		{"/api/v1/flows?" + many("x=1", 10_001), "x"},
		{"/api/v1/flows?" + many("sender=a", 10_001), "sender"},
		{"/api/v1/flows?sender=a&" + many("sort=delay", 20_000), "sort"},
		{"/api/v1/intervals?" + many("sender=a", 50_000), "sender"},
		{"/api/v1/links?" + strings.Repeat("a", 5000) + "=1", strings.Repeat("a", maxNameInError) + "..."},
	}
	for _, tc := range bad {
		name := tc.target
		if len(name) > 80 {
			name = name[:80]
		}
		t.Run(name, func(t *testing.T) {
			code, body := do(t, h, http.MethodGet, tc.target)
			if code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %.300s", code, body)
			}
			var e apiError
			if err := json.Unmarshal(body, &e); err != nil || e.Error == "" || e.Parameter != tc.param {
				t.Fatalf("error body %.300s (%v), want one naming parameter %q", body, err, tc.param)
			}
			if len(body) > 1024 {
				t.Errorf("error body of %d bytes for a hostile query", len(body))
			}
		})
	}
	good := []struct {
		target  string
		senders []string // the senders of the flows answered
	}{
		{"/api/v1/flows?sender=a&sort=delay&limit=2", []string{"a"}},
		{"/api/v1/flows?sender=b", []string{"b"}},
		{"/api/v1/flows?sender=%62", []string{"b"}},
		{"/api/v1/flows?sender=a&&", []string{"a"}},
		{"/api/v1/flows?prefix=10.0.0.0%2F8&sender=a", []string{"a"}},
		{"/api/v1/flows", []string{"a", "b"}},
	}
	for _, tc := range good {
		t.Run(tc.target, func(t *testing.T) {
			code, body := do(t, h, http.MethodGet, tc.target)
			if code != http.StatusOK {
				t.Fatalf("status %d: %s", code, body)
			}
			var ans struct {
				Flows []struct{ Sender string } `json:"flows"`
			}
			if err := json.Unmarshal(body, &ans); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range ans.Flows {
				if !slices.Contains(got, f.Sender) {
					got = append(got, f.Sender)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.senders) {
				t.Errorf("flows of senders %v, want %v", got, tc.senders)
			}
		})
	}
}

// FuzzParseQuery: on any input ParseQuery either refuses, naming a short
// parameter, or returns only allowed parameters, each once with a
// non-empty value, exactly as net/url decodes the same query.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"", "sender=a", "sender=nosuch;x=1", "%zz", "a=1&a=2", "sender=a&&limit=5", "sort=%64elay",
		"limit=1&limit=2", "prefix=10.0.0.0%2F8", "=x", "sender", "sender=", strings.Repeat("x=1&", 100)} {
		f.Add(s)
	}
	allowed := []string{"interval", "sender", "prefix", "min_packets", "sort", "limit"}
	f.Fuzz(func(t *testing.T, raw string) {
		q, e := ParseQuery(raw, allowed...)
		if e != nil {
			if q != nil {
				t.Fatalf("refused %q but returned values", raw)
			}
			if len(e.Param) > 4*maxNameInError+8 || e.Msg == "" { // %q of a cut name: at most 4 bytes a byte
				t.Fatalf("refusal of %q: param %q msg %q", raw, e.Param, e.Msg)
			}
			return
		}
		want, err := url.ParseQuery(raw)
		if err != nil {
			t.Fatalf("accepted %q, which net/url refuses: %v", raw, err)
		}
		if len(q) != len(want) || len(q) > len(allowed) {
			t.Fatalf("%q: got %v, net/url %v", raw, q, want)
		}
		for k, v := range q {
			if !slices.Contains(allowed, k) || len(v) != 1 || v[0] == "" || !slices.Equal(want[k], v) {
				t.Fatalf("%q: parameter %q = %q (net/url %q)", raw, k, v, want[k])
			}
		}
	})
}

// FuzzHandlerQuery: whatever the query, the API answers with a JSON body
// and a status it documents, and a 200 for a sender filter holds that
// sender's flows only.
func FuzzHandlerQuery(f *testing.F) {
	for _, s := range []string{"sender=a", "sender=a;x=1", "%zz", "limit=2&sort=loss", "prefix=10.0.0.0/8&min_packets=3"} {
		f.Add(s)
	}
	h := testStore().Handler()
	f.Fuzz(func(t *testing.T, raw string) {
		if strings.ContainsAny(raw, " #\r\n\t\x00") || !isPrintable(raw) {
			return // not a request line a client can send
		}
		code, body := do(t, h, http.MethodGet, "/api/v1/flows?"+raw)
		if !json.Valid(body) {
			t.Fatalf("%q: %d with a body that is not JSON: %.200s", raw, code, body)
		}
		switch code {
		case http.StatusOK:
			q, _ := url.ParseQuery(raw)
			var ans struct {
				Flows []struct{ Sender string } `json:"flows"`
			}
			_ = json.Unmarshal(body, &ans)
			if s := q.Get("sender"); s != "" {
				for _, fl := range ans.Flows {
					if fl.Sender != s {
						t.Fatalf("%q: a flow of sender %q in an answer filtered to %q", raw, fl.Sender, s)
					}
				}
			}
		case http.StatusBadRequest, http.StatusNotFound:
		default:
			t.Fatalf("%q: status %d: %s", raw, code, body)
		}
	})
}

func isPrintable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
