package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// docHint tells where every key is documented, in the tree and on an
// installed host.
const docHint = "every key: docs/config.md, installed as /usr/share/doc/lds/docs/config.md"

// unknownKeys walks a decoded YAML document against the type it will be
// decoded into and returns one error per key that type does not have,
// named by its full dotted path and line, with the keys that section has.
func unknownKeys(n *yaml.Node, t reflect.Type) []error {
	var errs []error
	walkKeys(n, t, "", &errs)
	return errs
}

func walkKeys(n *yaml.Node, t reflect.Type, path string, errs *[]error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			walkKeys(c, t, path, errs)
		}
		return
	}
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		fields := map[string]reflect.Type{}
		structKeys(t, fields)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			full := k
			if path != "" {
				full = path + "." + k
			}
			ft, ok := fields[k]
			if !ok {
				names := make([]string, 0, len(fields))
				for name := range fields {
					names = append(names, name)
				}
				sort.Strings(names)
				where := "the top level"
				if path != "" {
					where = path
				}
				*errs = append(*errs, fmt.Errorf("%s (line %d): unknown key; %s has: %s", full, n.Content[i].Line, where, strings.Join(names, ", ")))
				continue
			}
			walkKeys(n.Content[i+1], ft, full, errs)
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, c := range n.Content {
			walkKeys(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			walkKeys(n.Content[i+1], t.Elem(), path+"."+n.Content[i].Value, errs)
		}
	}
}

// structKeys adds the YAML keys of struct type t (inline fields merged).
func structKeys(t reflect.Type, into map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				structKeys(ft, into)
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		into[name] = f.Type
	}
}
