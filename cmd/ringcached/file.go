package main

// The YAML file: the same keys as the flags, and groups as a list.

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// decodeYAML overlays the YAML document data on cfg. It is strict: an
// unknown or repeated key, or a value of the wrong shape, is an error that
// names the key and its line. Keys are the flag names; "groups" is a list
// of mappings with the -group fields.
func decodeYAML(cfg *Config, data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	if doc.Kind == 0 { // an empty file
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want a mapping of settings", root.Line)
	}
	seen := map[string]bool{}
	for i := 0; i < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if seen[k.Value] {
			return fmt.Errorf("line %d: %s: given twice", k.Line, k.Value)
		}
		seen[k.Value] = true
		if k.Value == "groups" {
			if err := decodeGroups(cfg, v); err != nil {
				return err
			}
			continue
		}
		i := slices.IndexFunc(settings, func(s setting) bool { return s.name == k.Value })
		if i < 0 {
			return fmt.Errorf("line %d: unknown field %q", k.Line, k.Value)
		}
		s := settings[i]
		val, err := scalar(v, s.list)
		if err != nil {
			return fmt.Errorf("line %d: %s: %v", v.Line, k.Value, err)
		}
		if err := s.set(cfg, val); err != nil {
			return fmt.Errorf("line %d: %s: %v", v.Line, k.Value, err)
		}
	}
	return nil
}

func decodeGroups(cfg *Config, n *yaml.Node) error {
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: groups: want a list", n.Line)
	}
	for gi, gn := range n.Content {
		if gn.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: groups[%d]: want a mapping", gn.Line, gi)
		}
		var g GroupSpec
		seen := map[string]bool{}
		for i := 0; i < len(gn.Content); i += 2 {
			k, v := gn.Content[i], gn.Content[i+1]
			val, err := scalar(v, false)
			if err == nil {
				err = setGroupField(&g, k.Value, val, seen)
			} else {
				err = fmt.Errorf("%s: %v", k.Value, err)
			}
			if err != nil {
				return fmt.Errorf("line %d: groups[%d]: %v", k.Line, gi, err)
			}
		}
		cfg.Groups = append(cfg.Groups, g)
	}
	return nil
}

// scalar returns a node's text: a scalar's value, or for a list setting a
// sequence of scalars joined with commas.
func scalar(n *yaml.Node, list bool) (string, error) {
	switch {
	case n.Kind == yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "", nil
		}
		return n.Value, nil
	case n.Kind == yaml.SequenceNode && list:
		parts := make([]string, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return "", errors.New("want a list of strings")
			}
			parts = append(parts, c.Value)
		}
		return strings.Join(parts, ","), nil
	case list:
		return "", errors.New("want a string or a list of strings")
	}
	return "", errors.New("want a single value")
}
