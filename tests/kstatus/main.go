// Command kstatus prints the status that sigs.k8s.io/cli-utils/pkg/kstatus computes for Kubernetes
// objects: the rules Flux's health checks and kstatus-based `wait` tooling apply. The tests run it to
// check that Tierkeeper's custom resources report health those tools read with no custom config.
//
// Two sources of objects:
//
//	kstatus [FILE]         YAML or JSON documents from FILE, or stdin when FILE is absent or "-"
//	kstatus -kubeconfig K -gvr GROUP/VERSION/PLURAL [-namespace NS] NAME
//	                       one live object read from the API server named in kubeconfig K
//
// Output: one JSON object per input object, on its own line:
// {"apiVersion":..., "kind":..., "namespace":..., "name":..., "status":"Current", "message":...}.
// Exit status 0 when every object was computed, 1 on bad input or an unreachable server (the reason
// goes to stderr on one line).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type report struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	Status     string `json:"status"`
	Message    string `json:"message"`
}

func compute(obj *unstructured.Unstructured) (report, error) {
	result, err := status.Compute(obj)
	if err != nil {
		return report{}, fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return report{
		APIVersion: obj.GetAPIVersion(),
		Kind:       obj.GetKind(),
		Namespace:  obj.GetNamespace(),
		Name:       obj.GetName(),
		Status:     result.Status.String(),
		Message:    result.Message,
	}, nil
}

func fromReader(in io.Reader, out *json.Encoder) error {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bufio.NewReader(in), 4096)
	count := 0
	for {
		var raw runtime.RawExtension
		if err := decoder.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("document %d: %w", count+1, err)
		}
		if len(raw.Raw) == 0 || string(raw.Raw) == "null" { // an empty YAML document between two "---"
			continue
		}
		count++
		// Unstructured's own JSON decoding keeps integers as int64, which kstatus's accessors require
		// (a plain map decode would make metadata.generation a float64).
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw.Raw); err != nil {
			return fmt.Errorf("document %d: %w", count, err)
		}
		rep, err := compute(obj)
		if err != nil {
			return err
		}
		if err := out.Encode(rep); err != nil {
			return err
		}
	}
	if count == 0 {
		return errors.New("no objects in the input")
	}
	return nil
}

func fromServer(kubeconfig, gvr, namespace, name string, out *json.Encoder) error {
	parts := strings.Split(gvr, "/")
	if len(parts) != 3 {
		return fmt.Errorf("-gvr wants GROUP/VERSION/PLURAL (group empty for the core API), got %q", gvr)
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}
	resource := client.Resource(schema.GroupVersionResource{Group: parts[0], Version: parts[1], Resource: parts[2]})
	var getter dynamic.ResourceInterface = resource
	if namespace != "" {
		getter = resource.Namespace(namespace)
	}
	obj, err := getter.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	rep, err := compute(obj)
	if err != nil {
		return err
	}
	return out.Encode(rep)
}

func run() error {
	kubeconfig := flag.String("kubeconfig", "", "read the object from this cluster instead of a file")
	gvr := flag.String("gvr", "", "GROUP/VERSION/PLURAL of the live object (with -kubeconfig)")
	namespace := flag.String("namespace", "", "namespace of the live object (with -kubeconfig)")
	flag.Parse()
	out := json.NewEncoder(os.Stdout)
	if *kubeconfig != "" {
		if flag.NArg() != 1 || *gvr == "" {
			return errors.New("with -kubeconfig give -gvr GROUP/VERSION/PLURAL and exactly one object NAME")
		}
		return fromServer(*kubeconfig, *gvr, *namespace, flag.Arg(0), out)
	}
	switch {
	case flag.NArg() == 0 || (flag.NArg() == 1 && flag.Arg(0) == "-"):
		return fromReader(os.Stdin, out)
	case flag.NArg() == 1:
		file, err := os.Open(flag.Arg(0))
		if err != nil {
			return err
		}
		defer file.Close()
		return fromReader(file, out)
	default:
		return errors.New("give at most one FILE (or - for stdin)")
	}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "kstatus: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
}
