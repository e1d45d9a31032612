//! Views, kept in the meta region: a name and the query it stands for.
//!
//! Meta stores what compute hands it (compute checks that the query plans
//! before it asks). Tables and views share one namespace: CREATE VIEW of a
//! table's name is refused, as CREATE TABLE of a view's name is
//! (`Meta::create_table`), both under the DDL lock. A view is one key,
//! `keys::VIEW` + name, written through the meta region's raft log like
//! every catalog change. Nothing follows a view's dependencies: a table it
//! reads can be dropped, and the view then fails where it is used, naming
//! the missing table (SQLite's behaviour; PostgreSQL refuses the DROP).

use prost::Message;
use quarry_proto::meta::ViewDef;

use super::Meta;
use crate::engine::Engine;
use crate::{keys, Error, Result};

impl<E: Engine> Meta<E> {
    pub async fn views(&self) -> Result<Vec<ViewDef>> {
        self.leader().await?;
        self.scan_all(keys::VIEW)
    }

    /// The view named `name`, read on the leader (the caller checked
    /// leadership).
    pub(super) fn view_here(&self, name: &str) -> Result<Option<ViewDef>> {
        self.get(&keys::view_key(name))
    }

    /// Creates `view`, or replaces one of its name when `or_replace`;
    /// returns whether one was replaced.
    pub async fn create_view(&self, view: ViewDef, or_replace: bool) -> Result<bool> {
        if view.name.is_empty() || view.sql.trim().is_empty() {
            return Err(Error::InvalidInput(
                "a view needs a name and a query".into(),
            ));
        }
        let _ddl = self.ddl.lock().await;
        let region = self.leader().await?;
        if self.get_table(&view.name).await?.is_some() {
            return Err(Error::InvalidInput(format!(
                "a table named {} exists; a view cannot take its name",
                view.name
            )));
        }
        let exists = self.view_here(&view.name)?.is_some();
        if exists && !or_replace {
            return Err(Error::InvalidInput(format!(
                "view {} already exists (CREATE OR REPLACE VIEW replaces it)",
                view.name
            )));
        }
        self.propose(
            &region,
            vec![(keys::view_key(&view.name), view.encode_to_vec())],
            vec![],
        )
        .await?;
        tracing::info!(view = view.name, replaced = exists, "view written");
        Ok(exists)
    }

    /// Drops the view `name`; false when there was none and `if_exists`.
    pub async fn drop_view(&self, name: &str, if_exists: bool) -> Result<bool> {
        let _ddl = self.ddl.lock().await;
        let region = self.leader().await?;
        if self.view_here(name)?.is_none() {
            if self.get_table(name).await?.is_some() {
                return Err(Error::InvalidInput(format!(
                    "{name} is a table, not a view: use DROP TABLE"
                )));
            }
            return match if_exists {
                true => Ok(false),
                false => Err(Error::InvalidInput(format!("view {name} does not exist"))),
            };
        }
        self.propose(&region, vec![], vec![keys::view_key(name)])
            .await?;
        tracing::info!(view = name, "view dropped");
        Ok(true)
    }
}
