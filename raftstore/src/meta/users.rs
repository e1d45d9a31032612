//! Users who may log in to compute, kept in the meta region.
//!
//! Meta only stores what compute hands it: a name, an Argon2id hash of
//! the password (compute hashes and checks passwords; the plain text never
//! reaches a store) and whether the user is a superuser. A user is one
//! key, `keys::USER` + name, written through the meta region's raft log
//! like every catalog change, so every compute process sees the same
//! users, and a user created survives any store's crash. User changes take
//! the DDL lock: CREATE of a name that exists, or ALTER of one that does
//! not, is refused without a write.

use prost::Message;
use quarry_proto::meta::{PutUserMode, UserDef};

use super::Meta;
use crate::engine::Engine;
use crate::{keys, Error, Result};

/// The longest user name accepted.
const MAX_NAME_LEN: usize = 64;

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
    match ok {
        true => Ok(()),
        false => Err(Error::InvalidInput(format!(
            "user name '{name}' is not valid: 1 to {MAX_NAME_LEN} letters, digits, '_', '-' or '.'"
        ))),
    }
}

impl<E: Engine> Meta<E> {
    pub async fn get_user(&self, name: &str) -> Result<Option<UserDef>> {
        self.leader().await?;
        self.get(&keys::user_key(name))
    }

    pub async fn users(&self) -> Result<Vec<UserDef>> {
        self.leader().await?;
        self.scan_all(keys::USER)
    }

    pub async fn put_user(&self, user: UserDef, mode: PutUserMode) -> Result<()> {
        check_name(&user.name)?;
        if !user.password_hash.starts_with("$argon2") {
            return Err(Error::InvalidInput(format!(
                "user {}: the password must come as an Argon2 hash",
                user.name
            )));
        }
        let _ddl = self.ddl.lock().await;
        let region = self.leader().await?;
        let exists = self.get::<UserDef>(&keys::user_key(&user.name))?.is_some();
        match (mode, exists) {
            (PutUserMode::Create, true) => {
                return Err(Error::InvalidInput(format!(
                    "user {} already exists",
                    user.name
                )))
            }
            (PutUserMode::Alter, false) => {
                return Err(Error::InvalidInput(format!(
                    "user {} does not exist",
                    user.name
                )))
            }
            _ => {}
        }
        let key = keys::user_key(&user.name);
        self.propose(&region, vec![(key, user.encode_to_vec())], vec![])
            .await?;
        tracing::info!(user = user.name, ?mode, "user written");
        Ok(())
    }

    /// Drops `name`; false when there was no such user and `if_exists`.
    pub async fn drop_user(&self, name: &str, if_exists: bool) -> Result<bool> {
        let _ddl = self.ddl.lock().await;
        let region = self.leader().await?;
        if self.get::<UserDef>(&keys::user_key(name))?.is_none() {
            return match if_exists {
                true => Ok(false),
                false => Err(Error::InvalidInput(format!("user {name} does not exist"))),
            };
        }
        self.propose(&region, vec![], vec![keys::user_key(name)])
            .await?;
        tracing::info!(user = name, "user dropped");
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn user_names_are_checked() {
        assert!(check_name("root").is_ok());
        assert!(check_name("report_reader-2.eu").is_ok());
        let e = check_name("a b").unwrap_err().to_string();
        assert!(e.contains("user name 'a b' is not valid"), "{e}");
        assert!(check_name("").is_err());
        assert!(check_name(&"x".repeat(65)).is_err());
    }
}
