//! The upstream: the provider's API the proxy forwards to.

use http::uri::{Authority, PathAndQuery, Scheme, Uri};
use worklane_budget::Provider;

/// The provider's API, `http(s)://HOST[:PORT][/PREFIX]`: a request for `/v1/messages?x=1`
/// goes to `http(s)://HOST[:PORT][/PREFIX]/v1/messages?x=1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    scheme: Scheme,
    authority: Authority,
    /// The path prefix, without a trailing `/` (empty for none).
    prefix: String,
}

impl Upstream {
    /// The public API of a built-in model provider: `https://api.anthropic.com`,
    /// `https://api.openai.com`; `None` for any other.
    #[must_use]
    pub fn of(provider: &Provider) -> Option<Upstream> {
        let url = match provider {
            Provider::Anthropic => "https://api.anthropic.com",
            Provider::Openai => "https://api.openai.com",
            _ => return None,
        };
        url.parse().ok()
    }

    /// Its host and port, as the `Host` header of a forwarded request says them.
    #[must_use]
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// Whether it is reached over TLS.
    #[must_use]
    pub fn is_https(&self) -> bool {
        self.scheme == Scheme::HTTPS
    }

    /// Where a request for `path_and_query` goes.
    pub(crate) fn uri_for(
        &self,
        path_and_query: Option<&PathAndQuery>,
    ) -> Result<Uri, http::Error> {
        let tail = path_and_query.map_or("/", PathAndQuery::as_str);
        let tail = if tail.starts_with('/') { tail } else { "/" };
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(format!("{}{tail}", self.prefix))
            .build()
    }
}

/// `http(s)://HOST[:PORT][/PREFIX]`.
impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.prefix)
    }
}

/// Reads `http://` or `https://` with a host, an optional port and path prefix, and neither
/// a query, a fragment nor credentials.
impl std::str::FromStr for Upstream {
    type Err = Error;

    fn from_str(given: &str) -> Result<Upstream, Error> {
        let uri: Uri = given.parse().map_err(|source| Error::NotAUrl {
            given: given.to_owned(),
            source,
        })?;
        let scheme = uri
            .scheme()
            .filter(|s| **s == Scheme::HTTP || **s == Scheme::HTTPS)
            .cloned()
            .ok_or_else(|| Error::Scheme {
                given: given.to_owned(),
            })?;
        let authority = uri
            .authority()
            .filter(|a| !a.host().is_empty())
            .cloned()
            .ok_or_else(|| Error::NoHost {
                given: given.to_owned(),
            })?;
        if authority.as_str().contains('@') {
            return Err(Error::Credentials);
        }
        if uri.query().is_some() || given.contains('#') {
            return Err(Error::Query {
                given: given.to_owned(),
            });
        }
        let prefix = uri.path().trim_end_matches('/').to_owned();
        Ok(Upstream {
            scheme,
            authority,
            prefix,
        })
    }
}

/// An upstream URL that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Not a URL at all.
    #[error("cannot read the upstream {given:?} as a URL (https://api.anthropic.com)")]
    NotAUrl {
        /// What was given.
        given: String,
        /// Why.
        #[source]
        source: http::uri::InvalidUri,
    },
    /// Not `http://` or `https://`.
    #[error("the upstream {given:?} must start with https:// (or http:// for a local one)")]
    Scheme {
        /// What was given.
        given: String,
    },
    /// No host.
    #[error("the upstream {given:?} names no host")]
    NoHost {
        /// What was given.
        given: String,
    },
    /// A user or password in the URL (not repeated here).
    #[error(
        "the upstream URL carries credentials (user@ or user:password@): the proxy forwards \
         each client's own key; remove them"
    )]
    Credentials,
    /// A query or fragment: each request brings its own.
    #[error("the upstream {given:?} has a query or fragment: give the base URL only")]
    Query {
        /// What was given.
        given: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_keep_their_path_and_query_under_the_prefix() {
        let plain: Upstream = "https://api.anthropic.com".parse().expect("upstream");
        assert!(plain.is_https(), "reached over TLS");
        let pq = PathAndQuery::from_static("/v1/messages?beta=true");
        assert_eq!(
            plain.uri_for(Some(&pq)).expect("uri").to_string(),
            "https://api.anthropic.com/v1/messages?beta=true"
        );
        assert_eq!(
            plain.uri_for(None).expect("uri").to_string(),
            "https://api.anthropic.com/"
        );
        let prefixed: Upstream = "http://127.0.0.1:9000/gateway/".parse().expect("upstream");
        assert_eq!(prefixed.to_string(), "http://127.0.0.1:9000/gateway");
        assert!(!prefixed.is_https());
        assert_eq!(prefixed.authority().as_str(), "127.0.0.1:9000");
        assert_eq!(
            prefixed.uri_for(Some(&pq)).expect("uri").to_string(),
            "http://127.0.0.1:9000/gateway/v1/messages?beta=true"
        );
    }

    #[test]
    fn the_built_in_providers_have_their_public_apis() {
        assert_eq!(
            Upstream::of(&Provider::Anthropic).map(|u| u.to_string()),
            Some("https://api.anthropic.com".to_owned())
        );
        assert_eq!(
            Upstream::of(&Provider::Openai).map(|u| u.to_string()),
            Some("https://api.openai.com".to_owned())
        );
        assert_eq!(Upstream::of(&Provider::Github), None);
    }

    #[test]
    fn unusable_urls_are_refused_with_the_reason() {
        for (bad, says) in [
            ("ftp://x", "must start with https://"),
            ("api.anthropic.com", "must start with https://"),
            ("https://u:secret@h", "credentials"),
            ("https://h/?q=1", "query"),
            ("not a url", "cannot read"),
        ] {
            let err = bad.parse::<Upstream>().expect_err(bad);
            assert!(err.to_string().contains(says), "{bad}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }
}
