// Command porcupine checks a history recorded by `quarry chaos` for
// linearizability with Porcupine (github.com/anishathalye/porcupine).
//
// Usage: porcupine -history history.json [-html dir] [-timeout 60s]
//
// The history is one JSON object: {"workload": ..., "ops": [...],
// "faults": [...]}. Each op has a process, a function `f`, its call and
// return times in nanoseconds since the run began (`return` null when the
// outcome is unknown), an outcome ("ok", "fail" or "unknown") and the
// function's arguments and results. Two models check it:
//
//   - Registers, one per key (f = read, write, cas, rmw): a read returns
//     the register's value; a write sets it; a compare-and-set (`UPDATE …
//     WHERE v = old`) sets it if it held `old` (applied: one row changed);
//     a
//     read-modify-write (SELECT … FOR UPDATE, then UPDATE, in one
//     transaction) read `old` and wrote `value`.
//   - Groups of lists (f = append, read-group): an append transaction read
//     its keys' lists (`reads`) and appended `elems[i]` to `keys[i]`; a read
//     returns every list of the group.
//
// A CAS that changed no row is "ok" with applied false: the register did
// not hold `old` at some point of the call. Ops that failed for certain
// ("fail": a refused write, a conflict, nothing committed; a read that got
// an error) changed nothing and are left out. An op whose outcome is unknown stays open to the end of the
// history (Jepsen's rule): it may have taken effect at any point after its
// call, or never, and the model accepts whatever it would have returned.
//
// Each key (register) or group (lists) is checked on its own; the output
// is one JSON line: the verdict (Ok, Illegal, or Unknown when a check ran
// out of time), the operations checked, and the keys or groups that were
// not linearizable, each with the HTML view of its history written under
// -html.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

type op struct {
	Process int64              `json:"process"`
	F       string             `json:"f"`
	Key     int64              `json:"key"`
	Group   int64              `json:"group"`
	Value   *int64             `json:"value"`
	Old     *int64             `json:"old"`
	Keys    []int64            `json:"keys"`
	Elems   []int64            `json:"elems"`
	Applied bool               `json:"applied"`
	Reads   map[string][]int64 `json:"reads"`
	Call    int64              `json:"call"`
	Return  *int64             `json:"return"`
	Outcome string             `json:"outcome"`
	Error   string             `json:"error"`
}

type fault struct {
	Name  string `json:"name"`
	Start int64  `json:"start"`
	End   *int64 `json:"end"`
}

type history struct {
	Workload  string  `json:"workload"`
	GroupSize int64   `json:"group_size"`
	Ops       []op    `json:"ops"`
	Faults    []fault `json:"faults"`
}

type verdict struct {
	Verdict    string   `json:"verdict"`
	Checked    int      `json:"checked"`
	Partitions int      `json:"partitions"`
	Illegal    []string `json:"illegal"`
	Unknown    []string `json:"unknown"`
	Views      []string `json:"views"`
}

// registerModel: the state is the register's value (int64).
func registerModel() porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} { return int64(0) },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			s := state.(int64)
			o := input.(*op)
			known := o.Outcome == "ok"
			switch o.F {
			case "read":
				return *o.Value == s, s
			case "write":
				return true, *o.Value
			case "cas":
				if !known {
					if s == *o.Old {
						return true, *o.Value
					}
					return true, s
				}
				if o.Applied {
					return s == *o.Old, *o.Value
				}
				return s != *o.Old, s
			case "rmw":
				if !known {
					return true, *o.Value
				}
				return s == *o.Old, *o.Value
			}
			return false, s
		},
		DescribeOperation: func(input, output interface{}) string {
			o := input.(*op)
			v := func(p *int64) string {
				if p == nil {
					return "?"
				}
				return strconv.FormatInt(*p, 10)
			}
			switch o.F {
			case "read":
				return fmt.Sprintf("read k%d -> %s", o.Key, v(o.Value))
			case "write":
				return fmt.Sprintf("write k%d := %s (%s)", o.Key, v(o.Value), o.Outcome)
			case "cas":
				if o.Outcome == "ok" && !o.Applied {
					return fmt.Sprintf("cas k%d %s -> %s (not applied)", o.Key, v(o.Old), v(o.Value))
				}
				return fmt.Sprintf("cas k%d %s -> %s (%s)", o.Key, v(o.Old), v(o.Value), o.Outcome)
			case "rmw":
				return fmt.Sprintf("for-update k%d read %s, wrote %s (%s)", o.Key, v(o.Old), v(o.Value), o.Outcome)
			}
			return o.F
		},
		DescribeState: func(state interface{}) string {
			return strconv.FormatInt(state.(int64), 10)
		},
	}
}

// A group's state: each key's list, as "e1,e2|e3|..." (an immutable
// string compares with ==), keys in the order of their offset in the group.
func splitState(s string, n int64) []string {
	parts := strings.Split(s, "|")
	for int64(len(parts)) < n {
		parts = append(parts, "")
	}
	return parts
}

func listText(l []int64) string {
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = strconv.FormatInt(e, 10)
	}
	return strings.Join(parts, ",")
}

func appendModel(groupSize int64) porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} { return strings.Repeat("|", int(groupSize-1)) },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			lists := splitState(state.(string), groupSize)
			o := input.(*op)
			ok := o.Outcome == "ok"
			// Every list this op says it read must be the state's.
			for k, got := range o.Reads {
				key, err := strconv.ParseInt(k, 10, 64)
				if err != nil || !ok {
					continue
				}
				i := key - o.Group*groupSize
				if i < 0 || i >= groupSize || lists[i] != listText(got) {
					return false, state
				}
			}
			if o.F == "read-group" {
				if ok && int64(len(o.Reads)) != groupSize {
					return false, state
				}
				return true, state
			}
			next := append([]string(nil), lists...)
			for j, key := range o.Keys {
				i := key - o.Group*groupSize
				e := strconv.FormatInt(o.Elems[j], 10)
				if next[i] == "" {
					next[i] = e
				} else {
					next[i] = next[i] + "," + e
				}
			}
			return true, strings.Join(next, "|")
		},
		DescribeOperation: func(input, output interface{}) string {
			o := input.(*op)
			keys := make([]string, 0, len(o.Reads))
			for k := range o.Reads {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var read []string
			for _, k := range keys {
				read = append(read, fmt.Sprintf("k%s=[%s]", k, listText(o.Reads[k])))
			}
			if o.F == "read-group" {
				return fmt.Sprintf("read g%d -> %s", o.Group, strings.Join(read, " "))
			}
			var app []string
			for j, k := range o.Keys {
				app = append(app, fmt.Sprintf("k%d+=%d", k, o.Elems[j]))
			}
			return fmt.Sprintf("append g%d %s; read %s (%s)", o.Group, strings.Join(app, " "), strings.Join(read, " "), o.Outcome)
		},
		DescribeState: func(state interface{}) string { return state.(string) },
	}
}

func main() {
	path := flag.String("history", "", "the history (JSON) to check")
	htmlDir := flag.String("html", "", "where to write the HTML view of each history that fails")
	timeout := flag.Duration("timeout", 60*time.Second, "the most time the whole check may take")
	flag.Parse()
	text, err := os.ReadFile(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var h history
	if err := json.Unmarshal(text, &h); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", *path, err)
		os.Exit(2)
	}
	v := check(h, *htmlDir, *timeout)
	out, _ := json.Marshal(v)
	fmt.Println(string(out))
	if v.Verdict != "Ok" {
		os.Exit(1)
	}
}

// check checks h, key by key and group by group, writing the HTML view of
// each that fails under htmlDir (if not empty).
func check(h history, htmlDir string, timeout time.Duration) verdict {
	if h.GroupSize <= 0 {
		h.GroupSize = 4
	}
	// The end of the history: an op whose outcome is unknown returns
	// after every op that returned.
	var end int64
	for _, o := range h.Ops {
		if o.Return != nil && *o.Return > end {
			end = *o.Return
		}
	}
	end++
	registers := map[int64][]porcupine.Operation{}
	groups := map[int64][]porcupine.Operation{}
	checked := 0
	for i := range h.Ops {
		o := &h.Ops[i]
		if o.Outcome == "fail" {
			continue
		}
		ret := end
		if o.Return != nil && o.Outcome != "unknown" {
			ret = *o.Return
		}
		p := porcupine.Operation{ClientId: int(o.Process), Input: o, Call: o.Call, Output: nil, Return: ret}
		checked++
		switch o.F {
		case "read", "write", "cas", "rmw":
			registers[o.Key] = append(registers[o.Key], p)
		case "append", "read-group":
			groups[o.Group] = append(groups[o.Group], p)
		default:
			fmt.Fprintf(os.Stderr, "unknown op %q\n", o.F)
			os.Exit(2)
		}
	}
	v := verdict{Verdict: "Ok", Checked: checked, Illegal: []string{}, Unknown: []string{}, Views: []string{}}
	n := len(registers) + len(groups)
	v.Partitions = n
	per := timeout
	if n > 0 {
		per = timeout / time.Duration(n)
	}
	var annotations []porcupine.Annotation
	for _, f := range h.Faults {
		stop := end
		if f.End != nil {
			stop = *f.End
		}
		annotations = append(annotations, porcupine.Annotation{Tag: "nemesis", Start: f.Start, End: stop, Description: f.Name, BackgroundColor: "#fbb"})
	}
	checkOne := func(name string, model porcupine.Model, ops []porcupine.Operation) {
		res, info := porcupine.CheckOperationsVerbose(model, ops, per)
		switch res {
		case porcupine.Ok:
			return
		case porcupine.Illegal:
			v.Illegal = append(v.Illegal, name)
			if v.Verdict == "Ok" || v.Verdict == "Unknown" {
				v.Verdict = "Illegal"
			}
		default:
			v.Unknown = append(v.Unknown, name)
			if v.Verdict == "Ok" {
				v.Verdict = "Unknown"
			}
		}
		if htmlDir != "" {
			info.AddAnnotations(annotations)
			out := filepath.Join(htmlDir, name+".html")
			if err := porcupine.VisualizePath(model, info, out); err == nil {
				v.Views = append(v.Views, out)
			}
		}
	}
	keys := make([]int64, 0, len(registers))
	for k := range registers {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		checkOne(fmt.Sprintf("key-%d", k), registerModel(), registers[k])
	}
	gs := make([]int64, 0, len(groups))
	for g := range groups {
		gs = append(gs, g)
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i] < gs[j] })
	for _, g := range gs {
		checkOne(fmt.Sprintf("group-%d", g), appendModel(h.GroupSize), groups[g])
	}
	return v
}
