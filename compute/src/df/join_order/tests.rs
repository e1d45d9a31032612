use arrow::datatypes::{DataType, Field, Schema};
use datafusion::logical_expr::{col, table_scan};

use super::*;

/// A scan of `table` with BIGINT `columns`.
fn leaf(table: &str, columns: &[&str]) -> LogicalPlan {
    let fields: Vec<Field> = columns
        .iter()
        .map(|c| Field::new(*c, DataType::Int64, false))
        .collect();
    table_scan(Some(table), &Schema::new(fields), None)
        .unwrap()
        .build()
        .unwrap()
}

fn key(a: &str, b: &str) -> (Expr, Expr) {
    (col(a), col(b))
}

fn estimate_of(rows: f64, distinct: &[f64]) -> Estimate {
    Estimate {
        rows,
        distinct: distinct.iter().map(|d| Some(*d)).collect(),
    }
}

fn join(l: Tree, r: Tree) -> Tree {
    Tree::Join(Box::new(l), Box::new(r))
}

/// TPC-H Q9's graph at SF 1, in its FROM order, with the estimates the
/// region scans give (part's LIKE '%green%' keeps 1/32).
fn q9() -> (Graph, Vec<Estimate>) {
    let graph = Graph {
        leaves: vec![
            leaf("part", &["p_partkey"]),
            leaf("supplier", &["s_suppkey", "s_nationkey"]),
            leaf("lineitem", &["l_orderkey", "l_partkey", "l_suppkey"]),
            leaf("partsupp", &["ps_partkey", "ps_suppkey"]),
            leaf("orders", &["o_orderkey"]),
            leaf("nation", &["n_nationkey"]),
        ],
        filters: Vec::new(),
        keys: vec![
            key("part.p_partkey", "lineitem.l_partkey"),
            key("supplier.s_suppkey", "lineitem.l_suppkey"),
            key("lineitem.l_suppkey", "partsupp.ps_suppkey"),
            key("lineitem.l_partkey", "partsupp.ps_partkey"),
            key("lineitem.l_orderkey", "orders.o_orderkey"),
            key("supplier.s_nationkey", "nation.n_nationkey"),
        ],
    };
    let estimates = vec![
        estimate_of(6250.0, &[6250.0]),
        estimate_of(10e3, &[10e3, 25.0]),
        estimate_of(6e6, &[1.5e6, 200e3, 10e3]),
        estimate_of(800e3, &[200e3, 10e3]),
        estimate_of(1.5e6, &[1.5e6]),
        estimate_of(25.0, &[25.0]),
    ];
    (graph, estimates)
}

#[test]
fn q9_joins_part_to_partsupp_and_nation_to_supplier_before_lineitem() {
    let (graph, estimates) = q9();
    let keys = graph.classes().unwrap();
    // part, partsupp and lineitem's part keys are one class; supplier,
    // partsupp and lineitem's supplier keys another.
    assert_eq!(keys.classes, 4);
    let order = greedy_order(&graph, &keys, &estimates).unwrap();
    let (part, supplier, lineitem, partsupp, orders, nation) = (0, 1, 2, 3, 4, 5);
    let leafs = |i| Tree::Leaf(i);
    let expected = join(
        join(
            join(
                join(leafs(nation), leafs(supplier)),
                join(leafs(part), leafs(partsupp)),
            ),
            leafs(lineitem),
        ),
        leafs(orders),
    );
    assert_eq!(order, expected);

    let (plan, _) = build(&order, &graph.leaves, &keys, &mut []).unwrap();
    let shown = plan.display_indent().to_string();
    // Supplier meets partsupp through a key no join of the query names
    // (ps_suppkey = l_suppkey = s_suppkey), and lineitem is joined on
    // one key per class, not on every pair.
    assert!(
        shown.contains("Inner Join: supplier.s_suppkey = partsupp.ps_suppkey\n"),
        "{shown}"
    );
    assert!(
        shown.contains(
            "Inner Join: part.p_partkey = lineitem.l_partkey, \
             supplier.s_suppkey = lineitem.l_suppkey\n"
        ),
        "{shown}"
    );
}

#[test]
fn the_reordered_plan_keeps_the_columns_and_their_order() {
    let (graph, estimates) = q9();
    let keys = graph.classes().unwrap();
    let order = greedy_order(&graph, &keys, &estimates).unwrap();
    let (plan, _) = build(&order, &graph.leaves, &keys, &mut []).unwrap();
    // The old tree's columns: every leaf's, in FROM order.
    let mut old = graph.leaves[0].clone();
    for leaf in &graph.leaves[1..] {
        old = datafusion::logical_expr::LogicalPlanBuilder::from(old)
            .cross_join(leaf.clone())
            .unwrap()
            .build()
            .unwrap();
    }
    let restored = restore_columns(plan, old.schema()).unwrap();
    assert_eq!(restored.schema().as_ref(), old.schema().as_ref());
}

#[test]
fn parts_that_only_a_cross_product_would_join_keep_their_order() {
    let graph = Graph {
        leaves: vec![
            leaf("a", &["x"]),
            leaf("b", &["x"]),
            leaf("c", &["y"]),
            leaf("d", &["y"]),
        ],
        keys: vec![key("a.x", "b.x"), key("c.y", "d.y")],
        filters: Vec::new(),
    };
    let keys = graph.classes().unwrap();
    let estimates = vec![estimate_of(10.0, &[10.0]); 4];
    assert_eq!(greedy_order(&graph, &keys, &estimates), None);
}

#[test]
fn two_columns_of_one_leaf_in_a_class_are_both_joined() {
    // a.x = c.z and a.y = c.z: both of a's columns must meet c's.
    let graph = Graph {
        leaves: vec![leaf("a", &["x", "y"]), leaf("b", &["w"]), leaf("c", &["z"])],
        keys: vec![key("a.x", "c.z"), key("a.y", "c.z"), key("a.x", "b.w")],
        filters: Vec::new(),
    };
    let keys = graph.classes().unwrap();
    assert_eq!(keys.classes, 1);
    // a and b first: the class crosses that join, so both of a's
    // columns meet b's there (a.y = b.w follows from the keys), and the
    // join with c needs one key.
    let tree = join(join(Tree::Leaf(0), Tree::Leaf(1)), Tree::Leaf(2));
    let (plan, groups) = build(&tree, &graph.leaves, &keys, &mut []).unwrap();
    let shown = plan.display_indent().to_string();
    assert!(
        shown.contains("Inner Join: a.x = b.w, a.y = b.w\n"),
        "{shown}"
    );
    assert!(shown.contains("Inner Join: a.x = c.z\n"), "{shown}");
    // All one group at the top.
    let top: HashSet<_> = groups.iter().flatten().collect();
    assert_eq!(top.len(), 1);
}

#[test]
fn a_class_of_mixed_types_is_not_taken_apart() {
    let mut graph = Graph {
        leaves: vec![leaf("a", &["x"]), leaf("b", &["x"]), leaf("c", &["x"])],
        keys: vec![key("a.x", "b.x"), key("b.x", "c.x")],
        filters: Vec::new(),
    };
    assert!(graph.classes().is_some());
    let narrow = Schema::new(vec![Field::new("x", DataType::Int32, false)]);
    graph.leaves[2] = table_scan(Some("c"), &narrow, None)
        .unwrap()
        .build()
        .unwrap();
    assert!(graph.classes().is_none());
}

#[test]
fn flattening_sees_through_column_projections_and_stops_at_other_joins() {
    let (a, b, c) = (leaf("a", &["x"]), leaf("b", &["x"]), leaf("c", &["x"]));
    let ab = datafusion::logical_expr::LogicalPlanBuilder::from(a)
        .join(b, JoinType::Inner, (vec!["a.x"], vec!["b.x"]), None)
        .unwrap()
        .project([col("a.x")])
        .unwrap()
        .build()
        .unwrap();
    let top = datafusion::logical_expr::LogicalPlanBuilder::from(ab.clone())
        .join(c.clone(), JoinType::Inner, (vec!["a.x"], vec!["c.x"]), None)
        .unwrap()
        .build()
        .unwrap();
    let mut graph = Graph::default();
    let shape = graph.flatten(&top, true);
    assert_eq!(graph.leaves.len(), 3);
    assert_eq!(
        shape,
        join(join(Tree::Leaf(0), Tree::Leaf(1)), Tree::Leaf(2))
    );

    // A left join is a leaf, not part of the graph.
    let left = datafusion::logical_expr::LogicalPlanBuilder::from(ab)
        .join(c, JoinType::Left, (vec!["a.x"], vec!["c.x"]), None)
        .unwrap()
        .build()
        .unwrap();
    assert!(graph_join(&left).is_none());
}

#[test]
fn a_joins_other_condition_goes_to_the_lowest_join_with_its_leaves() {
    // Q7's shape: the condition on both nations' names.
    let graph = Graph {
        leaves: vec![
            leaf("n1", &["k"]),
            leaf("s", &["nk", "sk"]),
            leaf("c", &["nk", "sk"]),
            leaf("n2", &["k"]),
        ],
        keys: vec![
            key("n1.k", "s.nk"),
            key("s.sk", "c.sk"),
            key("c.nk", "n2.k"),
        ],
        filters: vec![col("n1.k").lt(col("n2.k")), col("s.nk").gt(col("c.nk"))],
    };
    let keys = graph.classes().unwrap();
    assert_eq!(keys.filters[0].1, vec![0, 3]);
    let tree = join(
        join(Tree::Leaf(0), Tree::Leaf(1)),
        join(Tree::Leaf(3), Tree::Leaf(2)),
    );
    let mut placed = vec![false; 2];
    let (plan, _) = build(&tree, &graph.leaves, &keys, &mut placed).unwrap();
    assert_eq!(placed, [true, true]);
    let shown = plan.display_indent().to_string();
    assert!(
        shown.starts_with("Inner Join: s.sk = c.sk Filter: n1.k < n2.k AND s.nk > c.nk\n"),
        "{shown}"
    );
    assert!(shown.contains("Inner Join: n1.k = s.nk\n"), "{shown}");
    assert!(shown.contains("Inner Join: n2.k = c.nk\n"), "{shown}");
}

#[test]
fn leaves_whose_columns_clash_without_the_projections_are_left_alone() {
    // `(SELECT b.v FROM a JOIN b ON a.id = b.id) JOIN (SELECT c.id + 0
    // AS id, c.w FROM c) ON c.w = b.v`: joined directly, a's `a.id` and
    // the derived table's unqualified `id` would be ambiguous.
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("w", DataType::Int64, false),
    ]);
    let derived = table_scan(Some("c"), &schema, None)
        .unwrap()
        .project([
            (col("c.id") + datafusion::logical_expr::lit(0i64)).alias("id"),
            col("c.w"),
        ])
        .unwrap()
        .build()
        .unwrap();
    let graph = Graph {
        leaves: vec![leaf("a", &["id"]), leaf("b", &["id", "v"]), derived],
        keys: vec![key("a.id", "b.id"), key("c.w", "b.v")],
        filters: Vec::new(),
    };
    assert!(graph.classes().is_none());
}

#[test]
fn a_new_order_must_cost_less_than_the_old() {
    let (graph, estimates) = q9();
    let keys = graph.classes().unwrap();
    let order = greedy_order(&graph, &keys, &estimates).unwrap();
    // The FROM order, as DataFusion joins it: part ⋈ lineitem, then
    // supplier, partsupp, orders, nation.
    let from = [1, 3, 4, 5]
        .into_iter()
        .fold(join(Tree::Leaf(0), Tree::Leaf(2)), |t, i| {
            join(t, Tree::Leaf(i))
        });
    let cost = |t: &Tree| tree_cost(t, &graph, &keys, &estimates).0;
    assert!(
        cost(&order) < cost(&from),
        "{} vs {}",
        cost(&order),
        cost(&from)
    );
    assert_eq!(cost(&order), cost(&order.clone()));
    // A tree that needs a cross product costs without bound.
    let cross = join(join(Tree::Leaf(0), Tree::Leaf(4)), Tree::Leaf(2));
    assert!(cost(&cross).is_infinite());
}
