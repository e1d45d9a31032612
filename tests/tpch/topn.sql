SELECT l_orderkey, l_linenumber, l_quantity, l_extendedprice, l_discount, l_tax, l_returnflag, l_shipdate
FROM lineitem
WHERE l_shipdate >= date '1998-01-01'
ORDER BY l_extendedprice DESC, l_orderkey, l_linenumber
LIMIT 10
