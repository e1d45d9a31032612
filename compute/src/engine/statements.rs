//! Statements compute answers itself: users, views, CREATE TABLE and
//! DESCRIBE.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use quarry_coprocessor::types::{arrow_type, sql_name};
use quarry_proto::meta::CreateTableRequest;

use crate::sql;
use crate::sql::users::UserStatement;
use crate::Result;

use super::*;

impl QueryEngine {
    /// CREATE/ALTER/DROP USER answer a word, SHOW USERS the users.
    pub(super) async fn user_statement(&self, stmt: UserStatement) -> Result<QueryOutput> {
        let word = match &stmt {
            UserStatement::Create { .. } => "CREATE USER",
            UserStatement::Alter { .. } => "ALTER USER",
            UserStatement::Drop { .. } => "DROP USER",
            UserStatement::Show => "",
        };
        let users = self.auth.execute(stmt).await?;
        if !word.is_empty() {
            return text_output("result", vec![word.into()]);
        }
        let schema = users_schema();
        let (names, superusers): (Vec<String>, Vec<bool>) = users.into_iter().unzip();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(names)) as ArrayRef,
                Arc::new(arrow::array::BooleanArray::from(superusers)) as ArrayRef,
            ],
        )?;
        Ok(QueryOutput::single(schema, batch))
    }

    /// CREATE VIEW: the query must plan over the tables and views there
    /// are now (and give as many columns as the view names) before meta
    /// stores it.
    pub(super) async fn create_view(&self, v: sql::CreateView) -> Result<QueryOutput> {
        let catalog = self.cluster.catalog().await?;
        if v.if_not_exists && catalog.views.iter().any(|x| x.name == v.name) {
            return text_output("result", vec!["CREATE VIEW (exists)".into()]);
        }
        let def = quarry_proto::meta::ViewDef {
            name: v.name,
            sql: v.query,
            columns: v.columns,
        };
        self.sql
            .view_schema(&def, catalog.tables, &catalog.views)
            .await?;
        let replaced = self.cluster.create_view(def, v.or_replace).await?;
        if replaced {
            // Other compute processes' kept catalogs lapse first
            // (`catalog_cache.rs`).
            tokio::time::sleep(crate::catalog_cache::DDL_SETTLE).await;
        }
        let word = match replaced {
            true => "CREATE VIEW (replaced)",
            false => "CREATE VIEW",
        };
        text_output("result", vec![word.into()])
    }

    pub(super) async fn create_table(&self, ct: sql::CreateTable) -> Result<QueryOutput> {
        let table = ct.table_def();
        let resp = self
            .cluster
            .create_table(CreateTableRequest {
                table: Some(table),
                split_handles: ct.split_handles,
                if_not_exists: ct.if_not_exists,
                ..Default::default()
            })
            .await?;
        text_output(
            "result",
            vec![if resp.already_existed {
                format!("CREATE TABLE (table {} already existed)", ct.name)
            } else {
                format!("CREATE TABLE ({} regions)", resp.regions.len())
            }],
        )
    }

    pub(super) async fn describe(&self, name: &str) -> Result<QueryOutput> {
        let t = self.table(name).await?;
        let schema = describe_schema();
        let mut cols: [Vec<String>; 4] = Default::default();
        for c in &t.columns {
            let ft = c.field_type.unwrap_or_default();
            cols[0].push(c.name.clone());
            let mut ty = sql_name(&arrow_type(&ft)?);
            if ft.max_len > 0 {
                ty = format!("{ty}({})", ft.max_len);
            }
            cols[1].push(ty);
            cols[2].push(if ft.nullable { "YES" } else { "NO" }.into());
            cols[3].push(
                if c.id == t.handle_column_id {
                    "PRI"
                } else {
                    ""
                }
                .into(),
            );
        }
        let arrays: Vec<ArrayRef> = cols
            .into_iter()
            .map(|v| Arc::new(StringArray::from(v)) as ArrayRef)
            .collect();
        Ok(QueryOutput::single(
            schema.clone(),
            RecordBatch::try_new(schema, arrays)?,
        ))
    }
}
