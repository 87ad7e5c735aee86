//! The table of configured operations ([`Operations`]): one optional slot per operation, each read from the
//! scenario as overrides merged onto that operation's recommended settings.
//!
//! Not for what the overrides may say or how they merge (`overrides`), nor for checking the values (`DemoConfig`
//! validates the whole section).

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use super::overrides::OperationOverrides;
use crate::operation::Operation;
use crate::settings::OperationConfig;

/// The configured operations. A missing key means the operation is not called (its part of a page is left out,
/// its endpoint answers 404); a present key, even empty, means the recommended settings with the given overrides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Operations {
    #[serde(
        default,
        deserialize_with = "pricing",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `pricing`: GET /price/{id} (seed 000).
    pub pricing: Option<OperationConfig>,
    #[serde(
        default,
        deserialize_with = "reviews",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `reviews`: GET /reviews/{id} (seed 001).
    pub reviews: Option<OperationConfig>,
    #[serde(
        default,
        deserialize_with = "payments",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `payments`: POST /payments/charge (seed 004).
    pub payments: Option<OperationConfig>,
    #[serde(
        default,
        deserialize_with = "report",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `report`: GET /report (seed 000 low-traffic endpoint).
    pub report: Option<OperationConfig>,
    #[serde(
        rename = "account-read",
        default,
        deserialize_with = "account_read",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `account-read`: GET /accounts/{id} (seed 004 read breaker).
    pub account_read: Option<OperationConfig>,
    #[serde(
        rename = "account-write",
        default,
        deserialize_with = "account_write",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `account-write`: POST /accounts/{id} (seed 004 write breaker).
    pub account_write: Option<OperationConfig>,
    #[serde(
        default,
        deserialize_with = "cart",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `cart`: `GET cart:{id}` on Redis (needs `redis:`); not among the defaults.
    pub cart: Option<OperationConfig>,
    #[serde(
        default,
        deserialize_with = "order",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `order`: a SERIALIZABLE transaction on PostgreSQL (needs `postgres:`); not among the defaults.
    pub order: Option<OperationConfig>,
    #[serde(
        rename = "cart-write",
        default,
        deserialize_with = "cart_write",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `cart-write`: `RPUSH cart:{id}` on Redis (needs `redis:`); not among the defaults.
    pub cart_write: Option<OperationConfig>,
}

impl Default for Operations {
    /// The six HTTP operations with their recommended settings (the Redis and PostgreSQL ones need an address,
    /// so they are configured only when named).
    fn default() -> Self {
        let mut all = Operations::none();
        for op in Operation::ALL
            .into_iter()
            .filter(|op| !op.is_redis() && !op.is_postgres())
        {
            *all.get_mut(op) = Some(op.recommended());
        }
        all
    }
}

impl Operations {
    /// No operation configured; add some with [`Operations::get_mut`].
    pub fn none() -> Self {
        Operations {
            pricing: None,
            reviews: None,
            payments: None,
            report: None,
            account_read: None,
            account_write: None,
            cart: None,
            order: None,
            cart_write: None,
        }
    }

    /// The configuration of `op`, if it is called.
    pub fn get(&self, op: Operation) -> Option<&OperationConfig> {
        match op {
            Operation::Pricing => self.pricing.as_ref(),
            Operation::Reviews => self.reviews.as_ref(),
            Operation::Payments => self.payments.as_ref(),
            Operation::Report => self.report.as_ref(),
            Operation::AccountRead => self.account_read.as_ref(),
            Operation::AccountWrite => self.account_write.as_ref(),
            Operation::Cart => self.cart.as_ref(),
            Operation::Order => self.order.as_ref(),
            Operation::CartWrite => self.cart_write.as_ref(),
        }
    }

    /// The slot of `op`, to configure or remove it.
    pub fn get_mut(&mut self, op: Operation) -> &mut Option<OperationConfig> {
        match op {
            Operation::Pricing => &mut self.pricing,
            Operation::Reviews => &mut self.reviews,
            Operation::Payments => &mut self.payments,
            Operation::Report => &mut self.report,
            Operation::AccountRead => &mut self.account_read,
            Operation::AccountWrite => &mut self.account_write,
            Operation::Cart => &mut self.cart,
            Operation::Order => &mut self.order,
            Operation::CartWrite => &mut self.cart_write,
        }
    }

    /// The configured operations in [`Operation::ALL`] order.
    pub fn configured(&self) -> impl Iterator<Item = (Operation, &OperationConfig)> {
        Operation::ALL
            .into_iter()
            .filter_map(|op| self.get(op).map(|c| (op, c)))
    }
}

/// Reads one operation's overrides (a present but empty key, `pricing:`, means "recommended").
fn operation<'de, D: Deserializer<'de>>(
    d: D,
    op: Operation,
) -> Result<Option<OperationConfig>, D::Error> {
    let overrides = Option::<OperationOverrides>::deserialize(d)?;
    Ok(Some(overrides.unwrap_or_default().apply_to(op)))
}

macro_rules! operation_reader {
    ($name:ident, $op:expr) => {
        fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<OperationConfig>, D::Error> {
            operation(d, $op)
        }
    };
}
operation_reader!(pricing, Operation::Pricing);
operation_reader!(reviews, Operation::Reviews);
operation_reader!(payments, Operation::Payments);
operation_reader!(report, Operation::Report);
operation_reader!(account_read, Operation::AccountRead);
operation_reader!(account_write, Operation::AccountWrite);
operation_reader!(cart, Operation::Cart);
operation_reader!(order, Operation::Order);
operation_reader!(cart_write, Operation::CartWrite);
