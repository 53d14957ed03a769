// Command promrules checks the alerting rules of prometheus-operator PrometheusRule objects with
// Prometheus's own parsers: every expr must parse as PromQL (github.com/prometheus/prometheus/promql/parser),
// every `for` as a Prometheus duration, every label name be valid, and every annotation and label value
// parse as a Prometheus alert template (text/template with the template functions Prometheus offers).
// The tests run it on the chart's rendered PrometheusRule.
//
//	promrules < rendered.yaml     # YAML documents; kinds other than PrometheusRule are skipped
//
// Output: one line per rule, "ok <group>/<alert>"; exit status 1 with one line per problem otherwise.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"text/template"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"gopkg.in/yaml.v3"
)

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type document struct {
	Kind string `yaml:"kind"`
	Spec struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	} `yaml:"spec"`
}

// The functions Prometheus's alert templates offer (template.go of Prometheus); only parsing needs them.
var templateFuncs = template.FuncMap{}

func init() {
	for _, name := range []string{
		"query", "first", "label", "value", "strvalue", "args", "reReplaceAll", "safeHtml", "match",
		"title", "toUpper", "toLower", "graphLink", "tableLink", "sortByLabel", "humanize", "humanize1024",
		"humanizeDuration", "humanizePercentage", "humanizeTimestamp", "toTime", "toDuration", "pathPrefix",
		"externalURL", "parseDuration", "stripPort", "stripDomain", "now",
	} {
		templateFuncs[name] = func(...any) any { return nil }
	}
}

func checkRule(where string, r rule) []string {
	var problems []string
	if r.Alert == "" && r.Record == "" {
		problems = append(problems, where+": neither alert nor record")
	}
	if _, err := parser.ParseExpr(r.Expr); err != nil {
		problems = append(problems, fmt.Sprintf("%s: expr: %v", where, err))
	}
	if r.For != "" {
		if _, err := model.ParseDuration(r.For); err != nil {
			problems = append(problems, fmt.Sprintf("%s: for: %v", where, err))
		}
	}
	for name, value := range r.Labels {
		if !model.LabelName(name).IsValid() {
			problems = append(problems, fmt.Sprintf("%s: label name %q is invalid", where, name))
		}
		problems = append(problems, checkTemplate(where+": label "+name, value)...)
	}
	for name, value := range r.Annotations {
		if !model.LabelName(name).IsValid() {
			problems = append(problems, fmt.Sprintf("%s: annotation name %q is invalid", where, name))
		}
		problems = append(problems, checkTemplate(where+": annotation "+name, value)...)
	}
	return problems
}

func checkTemplate(where, text string) []string {
	defs := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}"
	if _, err := template.New(where).Funcs(templateFuncs).Option("missingkey=zero").Parse(defs + text); err != nil {
		return []string{fmt.Sprintf("%s: %v", where, err)}
	}
	return nil
}

func run(in io.Reader, out io.Writer) ([]string, error) {
	decoder := yaml.NewDecoder(bufio.NewReader(in))
	var problems []string
	rules := 0
	for count := 1; ; count++ {
		var doc document
		if err := decoder.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("document %d: %w", count, err)
		}
		if doc.Kind != "PrometheusRule" {
			continue
		}
		for _, group := range doc.Spec.Groups {
			for _, r := range group.Rules {
				rules++
				where := group.Name + "/" + r.Alert + r.Record
				found := checkRule(where, r)
				if len(found) == 0 {
					fmt.Fprintf(out, "ok %s\n", where)
				}
				problems = append(problems, found...)
			}
		}
	}
	if rules == 0 {
		return nil, errors.New("no PrometheusRule with rules in the input")
	}
	return problems, nil
}

func main() {
	problems, err := run(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "promrules:", err)
		os.Exit(1)
	}
	for _, problem := range problems {
		fmt.Fprintln(os.Stderr, problem)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}
