package api

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// maxNameInError bounds a parameter name or value quoted in an error: the
// query is what a client sends.
const maxNameInError = 64

// QueryError is a query string refused by ParseQuery: Param names the
// parameter at fault ("" when the query as a whole is).
type QueryError struct {
	Param string
	Msg   string
}

func (e *QueryError) Error() string {
	if e.Param == "" {
		return e.Msg
	}
	return e.Param + ": " + e.Msg
}

// ParseQuery parses a raw query string strictly, for an endpoint taking
// the allowed parameters: every parameter must be one of them, given once,
// with a non-empty value, each key and value must be validly
// percent-encoded, and pairs are separated by '&' only (a ';' is refused,
// never read as a separator or silently dropped). It stops at the first
// fault: since a parameter given twice is one, a query of thousands of
// parameters is refused after at most len(allowed)+1 of them, naming the
// first that is unknown or repeated. Empty pairs (a stray '&') carry
// nothing and are skipped. A typo therefore never drops a
// filter: the query is answered as written or refused, naming the
// parameter. Safe for any input (fuzzed: FuzzParseQuery).
func ParseQuery(raw string, allowed ...string) (url.Values, *QueryError) {
	q := url.Values{}
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		rawKey, rawVal, hasVal := strings.Cut(part, "=")
		key, err := url.QueryUnescape(rawKey)
		if err != nil {
			return nil, &QueryError{Param: quoteCut(rawKey), Msg: fmt.Sprintf("the parameter name is not valid percent-encoding (%v)", err)}
		}
		if strings.Contains(part, ";") {
			return nil, &QueryError{Param: quoteCut(key), Msg: fmt.Sprintf("%s holds a ';': separate parameters with '&' (percent-encode a literal ';' as %%3B)", quoteCut(part))}
		}
		if !slices.Contains(allowed, key) {
			return nil, &QueryError{Param: quoteCut(key), Msg: "unknown parameter; this endpoint takes " + strings.Join(allowed, ", ")}
		}
		val, err := url.QueryUnescape(rawVal)
		if err != nil {
			return nil, &QueryError{Param: key, Msg: fmt.Sprintf("the value %s is not valid percent-encoding (%v)", quoteCut(rawVal), err)}
		}
		if !hasVal || val == "" {
			return nil, &QueryError{Param: key, Msg: "has no value; give one, or leave the parameter out for its default"}
		}
		if q.Has(key) {
			return nil, &QueryError{Param: key, Msg: "given more than once; give it once"}
		}
		q.Set(key, val)
	}
	return q, nil
}

// quoteCut is s, cut to maxNameInError bytes (on a rune boundary) and
// quoted when it holds anything but printable ASCII.
func quoteCut(s string) string {
	if s == "" {
		return `""`
	}
	if len(s) > maxNameInError {
		i := maxNameInError
		for i > 0 && !isRuneStart(s[i]) {
			i--
		}
		s = s[:i] + "..."
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e || s[i] == '"' || s[i] == '\\' {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// paramErrorOf turns a QueryError into the handler's 400.
func paramErrorOf(e *QueryError) *paramError {
	return &paramError{status: http.StatusBadRequest, param: e.Param, msg: e.Msg}
}
