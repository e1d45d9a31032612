CREATE TABLE region (
    r_regionkey BIGINT NOT NULL,
    r_name      CHAR(25) NOT NULL,
    r_comment   VARCHAR(152) NOT NULL
)
