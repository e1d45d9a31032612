package main

import (
	"testing"
	"time"
)

func i64(v int64) *int64 { return &v }

func reg(p int64, f string, key int64, value, old *int64, call, ret int64, outcome string) op {
	o := op{Process: p, F: f, Key: key, Value: value, Old: old, Call: call, Outcome: outcome}
	if outcome != "unknown" {
		o.Return = i64(ret)
	}
	return o
}

func verdictOf(ops []op) string {
	return check(history{GroupSize: 3, Ops: ops}, "", 10*time.Second).Verdict
}

func TestRegisterHistories(t *testing.T) {
	write5 := reg(0, "write", 1, i64(5), nil, 0, 10, "ok")
	cases := []struct {
		name string
		ops  []op
		want string
	}{
		{"a read after a write sees it", []op{write5, reg(1, "read", 1, i64(5), nil, 11, 20, "ok")}, "Ok"},
		{"a stale read after a write returned", []op{write5, reg(1, "read", 1, i64(0), nil, 11, 20, "ok")}, "Illegal"},
		{"a concurrent read may see either", []op{write5, reg(1, "read", 1, i64(0), nil, 5, 20, "ok")}, "Ok"},
		{"a cas that applied needs its old value", []op{write5, func() op {
			o := reg(1, "cas", 1, i64(7), i64(4), 11, 20, "ok")
			o.Applied = true
			return o
		}()}, "Illegal"},
		{"a cas that missed needs another value", []op{write5, reg(1, "cas", 1, i64(7), i64(5), 11, 20, "ok")}, "Illegal"},
		{"an unknown write may show up later", []op{write5, reg(2, "write", 1, i64(9), nil, 11, 0, "unknown"), reg(1, "read", 1, i64(9), nil, 30, 40, "ok")}, "Ok"},
		{"or never", []op{write5, reg(2, "write", 1, i64(9), nil, 11, 0, "unknown"), reg(1, "read", 1, i64(5), nil, 30, 40, "ok")}, "Ok"},
		{"a failed write must not show up", []op{write5, reg(2, "write", 1, i64(9), nil, 11, 12, "fail"), reg(1, "read", 1, i64(9), nil, 30, 40, "ok")}, "Illegal"},
		{"a locked read-modify-write read the latest", []op{write5, reg(1, "rmw", 1, i64(8), i64(0), 11, 20, "ok")}, "Illegal"},
		{"keys are independent", []op{write5, reg(1, "read", 2, i64(0), nil, 11, 20, "ok")}, "Ok"},
	}
	for _, c := range cases {
		if got := verdictOf(c.ops); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

func TestGroupHistories(t *testing.T) {
	appendOp := func(p int64, keys, elems []int64, reads map[string][]int64, call, ret int64, outcome string) op {
		o := op{Process: p, F: "append", Group: 1, Keys: keys, Elems: elems, Reads: reads, Call: call, Outcome: outcome}
		if outcome != "unknown" {
			o.Return = i64(ret)
		}
		return o
	}
	read := func(p int64, reads map[string][]int64, call, ret int64) op {
		return op{Process: p, F: "read-group", Group: 1, Reads: reads, Call: call, Return: i64(ret), Outcome: "ok"}
	}
	first := appendOp(0, []int64{3, 4}, []int64{10, 11}, map[string][]int64{"3": {}, "4": {}}, 0, 10, "ok")
	cases := []struct {
		name string
		ops  []op
		want string
	}{
		{"a read sees a committed append whole", []op{first, read(1, map[string][]int64{"3": {10}, "4": {11}, "5": {}}, 11, 20)}, "Ok"},
		{"half an append is a torn read", []op{first, read(1, map[string][]int64{"3": {10}, "4": {}, "5": {}}, 11, 20)}, "Illegal"},
		{"an append must read the state it appends to", []op{first, appendOp(2, []int64{3}, []int64{12}, map[string][]int64{"3": {}}, 11, 20, "ok")}, "Illegal"},
		{"appends order the lists", []op{first, appendOp(2, []int64{3}, []int64{12}, map[string][]int64{"3": {10}}, 11, 20, "ok"), read(1, map[string][]int64{"3": {10, 12}, "4": {11}, "5": {}}, 21, 30)}, "Ok"},
		{"an unknown append whole or not at all", []op{first, appendOp(2, []int64{3, 5}, []int64{12, 13}, nil, 11, 0, "unknown"), read(1, map[string][]int64{"3": {10, 12}, "4": {11}, "5": {13}}, 21, 30)}, "Ok"},
		{"an unknown append never half", []op{first, appendOp(2, []int64{3, 5}, []int64{12, 13}, nil, 11, 0, "unknown"), read(1, map[string][]int64{"3": {10, 12}, "4": {11}, "5": {}}, 21, 30)}, "Illegal"},
	}
	for _, c := range cases {
		if got := verdictOf(c.ops); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
