-- SQL cases over the 8 TPC-H tables: single-table BI queries and joins.
-- Each case is a `-- name: <name>` line and one statement ending in `;`.
-- Golden answers: tests/sql/answers/<name>.csv and .types, made by DuckDB
-- (scripts/sql_answers.sh), never by Quarry. Every result is ordered on all
-- its output columns or a unique key, and small.

-- name: count_filtered_shipdate_between
select count(*) as n
from lineitem
where l_shipdate between date '1995-01-01' and date '1995-12-31';

-- name: count_star_multiple_filters
select count(*) as n
from lineitem
where l_quantity > 45 and l_discount >= 0.05 and l_returnflag = 'N';

-- name: case_when_returnflag
select l_returnflag,
       case when l_returnflag = 'R' then 'returned'
            when l_returnflag = 'A' then 'accepted'
            else 'none' end as flag_desc,
       count(*) as n
from lineitem
group by l_returnflag,
         case when l_returnflag = 'R' then 'returned'
              when l_returnflag = 'A' then 'accepted'
              else 'none' end
order by l_returnflag;

-- name: group_by_case_price_band
select case when o_totalprice < 50000 then 'low'
            when o_totalprice < 200000 then 'mid'
            else 'high' end as band,
       count(*) as n,
       sum(o_totalprice) as total
from orders
group by case when o_totalprice < 50000 then 'low'
              when o_totalprice < 200000 then 'mid'
              else 'high' end
order by band;

-- name: extract_year_orders
select extract(year from o_orderdate) as yr,
       count(*) as n,
       sum(o_totalprice) as total
from orders
group by extract(year from o_orderdate)
order by yr;

-- name: extract_year_month_shipments
select extract(year from l_shipdate) as yr,
       extract(month from l_shipdate) as mo,
       count(*) as n
from lineitem
where l_shipdate >= date '1998-01-01'
group by extract(year from l_shipdate), extract(month from l_shipdate)
order by yr, mo;

-- name: modulo_bucket_orderkey
select o_orderkey % 7 as bucket, count(*) as n, min(o_orderkey) as first_key
from orders
group by o_orderkey % 7
order by bucket;

-- name: count_distinct_customers_by_status
select o_orderstatus, count(distinct o_custkey) as customers, count(*) as n
from orders
group by o_orderstatus
order by o_orderstatus;

-- name: count_distinct_global
select count(distinct l_partkey) as parts,
       count(distinct l_suppkey) as suppliers,
       count(distinct l_shipmode) as modes
from lineitem;

-- name: having_many_orders
select o_custkey, count(*) as n, sum(o_totalprice) as total
from orders
group by o_custkey
having count(*) >= 28
order by o_custkey;

-- name: order_by_aggregate_top_customers
select o_custkey, sum(o_totalprice) as total
from orders
group by o_custkey
order by total desc, o_custkey
limit 10;

-- name: order_by_count_nations
select c_nationkey, count(*) as n
from customer
group by c_nationkey
order by n desc, c_nationkey
limit 5;

-- name: like_prefix_part_name
select p_partkey, p_name
from part
where p_name like 'forest%'
order by p_partkey;

-- name: like_general_part_type
select p_type, count(*) as n, min(p_partkey) as first_key
from part
where p_type like '%BRUSHED%' and p_name like '%green%'
group by p_type
order by p_type;

-- name: not_like_comment
select count(*) as n
from orders
where o_comment not like '%special%requests%';

-- name: in_list_shipmode
select l_shipmode, count(*) as n, sum(l_quantity) as qty
from lineitem
where l_shipmode in ('MAIL', 'SHIP', 'AIR')
group by l_shipmode
order by l_shipmode;

-- name: not_in_list_part_size
select count(*) as n
from part
where p_size not in (1, 5, 10, 15, 20) and p_brand <> 'Brand#45';

-- name: is_null_nullif
select count(*) as n
from orders
where nullif(o_orderstatus, 'F') is null;

-- name: is_not_null_case
select o_orderpriority, count(*) as n
from orders
where case when o_totalprice > 300000 then o_orderkey end is not null
group by o_orderpriority
order by o_orderpriority;

-- name: coalesce_nullif_segment
select coalesce(nullif(c_mktsegment, 'BUILDING'), 'other') as seg, count(*) as n
from customer
group by coalesce(nullif(c_mktsegment, 'BUILDING'), 'other')
order by seg;

-- name: substring_phone_country
select substring(c_phone, 1, 2) as cc, count(*) as n, sum(c_acctbal) as bal
from customer
group by substring(c_phone, 1, 2)
order by cc
limit 10;

-- name: string_equality_segment
select count(*) as n, sum(c_acctbal) as bal, min(c_custkey) as first_key
from customer
where c_mktsegment = 'BUILDING';

-- name: between_dates_orders
select count(*) as n, min(o_orderkey) as min_key, max(o_orderkey) as max_key
from orders
where o_orderdate between date '1996-03-01' and date '1996-03-31';

-- name: min_max_dates
select min(l_shipdate) as first_ship, max(l_shipdate) as last_ship,
       min(l_receiptdate) as first_receipt, max(l_commitdate) as last_commit
from lineitem;

-- name: min_max_strings
select min(c_name) as first_name, max(c_name) as last_name,
       min(c_mktsegment) as min_seg, max(c_address) as max_address
from customer;

-- name: limit_offset_prices
select o_orderkey, o_totalprice
from orders
order by o_totalprice desc, o_orderkey
limit 10 offset 5;

-- name: distinct_flags
select distinct l_returnflag, l_linestatus
from lineitem
order by l_returnflag, l_linestatus;

-- name: sum_decimal_expressions
select l_returnflag, l_linestatus,
       sum(l_quantity) as qty,
       sum(l_extendedprice * (1 - l_discount)) as revenue,
       sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as charge
from lineitem
group by l_returnflag, l_linestatus
order by l_returnflag, l_linestatus;

-- name: avg_by_shipmode
select l_shipmode, avg(l_quantity) as avg_qty, avg(l_extendedprice) as avg_price,
       avg(l_discount) as avg_disc
from lineitem
group by l_shipmode
order by l_shipmode;

-- name: avg_integer_size
select p_mfgr, avg(p_size) as avg_size, count(*) as n
from part
group by p_mfgr
order by p_mfgr;

-- name: join2_segment_totals
select c_mktsegment, count(*) as n, sum(o_totalprice) as total
from customer
join orders on c_custkey = o_custkey
group by c_mktsegment
order by c_mktsegment;

-- name: join2_supplier_nation
select s_suppkey, s_name, n_name
from supplier
join nation on s_nationkey = n_nationkey
where n_name in ('GERMANY', 'FRANCE')
order by s_suppkey;

-- name: join3_nation_order_totals
select n_name, count(*) as n, sum(o_totalprice) as total
from customer
join orders on c_custkey = o_custkey
join nation on c_nationkey = n_nationkey
group by n_name
order by total desc, n_name
limit 10;

-- name: join4_region_supply_value
select r_name, count(*) as n, sum(ps_supplycost * ps_availqty) as value
from region
join nation on r_regionkey = n_regionkey
join supplier on n_nationkey = s_nationkey
join partsupp on s_suppkey = ps_suppkey
group by r_name
order by r_name;

-- name: join4_nation_revenue_1994
select n_name, sum(l_extendedprice * (1 - l_discount)) as revenue, count(*) as n
from customer
join orders on c_custkey = o_custkey
join lineitem on l_orderkey = o_orderkey
join nation on c_nationkey = n_nationkey
where o_orderdate >= date '1994-01-01' and o_orderdate < date '1995-01-01'
group by n_name
order by revenue desc, n_name
limit 10;

-- name: left_join_is_null
select count(*) as n
from customer
left join orders on c_custkey = o_custkey
where o_orderkey is null;

-- name: left_join_counts_coalesce
select c_custkey, count(o_orderkey) as n, coalesce(sum(o_totalprice), 0) as total
from customer
left join orders on c_custkey = o_custkey
where c_custkey <= 12
group by c_custkey
order by c_custkey;

-- name: semi_join_exists
select o_orderpriority, count(*) as n
from orders
where o_orderdate >= date '1993-07-01' and o_orderdate < date '1993-10-01'
  and exists (select 1 from lineitem
              where l_orderkey = o_orderkey and l_commitdate < l_receiptdate)
group by o_orderpriority
order by o_orderpriority;

-- name: semi_join_in_subquery
select count(*) as n, sum(p_retailprice) as total
from part
where p_partkey in (select l_partkey from lineitem where l_quantity >= 50);

-- name: anti_join_not_exists
select count(*) as n
from customer
where not exists (select 1 from orders where o_custkey = c_custkey);

-- name: anti_join_not_in
select count(*) as n
from supplier
where s_suppkey not in (select ps_suppkey from partsupp where ps_availqty < 20);

-- name: anti_join_not_in_with_null
-- A NULL among NOT IN's values leaves no row (DataFusion's null-aware
-- anti join; join_keys.rs never filters the probe side of one).
select count(*) as n
from supplier
where s_suppkey not in (
    select case when ps_availqty < 20 then null else ps_suppkey end
    from partsupp
    where ps_availqty < 40
);

-- name: scalar_subquery_above_average
select count(*) as n
from orders
where o_totalprice > (select avg(o_totalprice) from orders);

-- name: correlated_scalar_subquery_count
select p_partkey,
       (select count(*) from partsupp where ps_partkey = p_partkey) as suppliers
from part
where p_partkey <= 5
order by p_partkey;

-- name: self_join_nations_same_region
select n1.n_name as nation, n2.n_name as neighbour
from nation n1
join nation n2 on n1.n_regionkey = n2.n_regionkey and n1.n_nationkey < n2.n_nationkey
where n1.n_regionkey = 1
order by nation, neighbour;

-- name: cte_customer_totals
with totals as (
    select o_custkey, sum(o_totalprice) as total, count(*) as orders
    from orders
    group by o_custkey
)
select c_mktsegment, count(*) as customers, max(total) as max_total, sum(orders) as n
from totals
join customer on c_custkey = o_custkey
group by c_mktsegment
order by c_mktsegment;

-- name: join_orders_quarter_lineitem
select o_orderpriority, count(*) as lines, sum(l_quantity) as qty
from orders
join lineitem on l_orderkey = o_orderkey
where o_orderdate >= date '1995-01-01' and o_orderdate < date '1995-04-01'
group by o_orderpriority
order by o_orderpriority;

-- name: recursive_cte_joins_nation_each_round
-- A recursive CTE whose recursive part joins a Quarry table: DataFusion
-- runs that part once per round (each run's region scans start without
-- the join filters of an earlier run, region_scan.rs `reset_state`).
with recursive chain(k, total) as (
    select cast(0 as bigint) as k, cast(0 as bigint) as total
    union all
    select chain.k + 1, chain.total + n_regionkey
    from chain join nation on n_nationkey = chain.k
    where chain.k < 24
)
select count(*) as rounds, max(k) as last_key, max(total) as total
from chain;

-- name: correlated_count_lt_lineitem
-- A count(*) correlated by an equality and an inequality with the outer
-- row (DataFusion alone refuses it; df/decorrelate/ unnests it): the
-- filters on both tables still run in their regions below the joins.
select o_orderpriority, count(*) as orders
from orders o
where o_orderdate >= date '1995-01-01' and o_orderdate < date '1995-04-01'
  and (select count(*) from lineitem l
       where l.l_orderkey = o.o_orderkey
         and l.l_commitdate < l.l_receiptdate
         and l.l_extendedprice * 4 > o.o_totalprice) > 1
group by o_orderpriority
order by o_orderpriority;

-- name: correlated_rank_in_select_list_nested
-- Correlated only by inequalities, in the SELECT list and in a nested
-- EXISTS two levels down.
select n1.n_name,
       (select count(*) from nation n2
        where n2.n_nationkey < n1.n_nationkey
          and exists (select 1 from region r
                      where r.r_regionkey = n2.n_regionkey
                        and r.r_regionkey <> n1.n_regionkey)) as below_elsewhere
from nation n1
where n1.n_regionkey in (1, 3)
order by n1.n_name;
