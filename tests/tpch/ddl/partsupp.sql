CREATE TABLE partsupp (
    ps_partkey    BIGINT NOT NULL,
    ps_suppkey    BIGINT NOT NULL,
    ps_availqty   BIGINT NOT NULL,
    ps_supplycost DECIMAL(15,2) NOT NULL,
    ps_comment    VARCHAR(199) NOT NULL
)
