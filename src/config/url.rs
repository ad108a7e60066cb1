//! `health_url`: an `http://host[:port]/path` URL, checked when the config
//! is read and used as it was checked.

use std::fmt;

/// An `http://host[:port]/path` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl HttpUrl {
    pub fn parse(url: &str) -> Result<HttpUrl, String> {
        let Some(rest) = url.strip_prefix("http://") else {
            return Err(format!(
                "{url:?} must start with http:// (for https, use `health_command` with curl)"
            ));
        };
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) => (
                h,
                p.parse::<u16>()
                    .map_err(|_| format!("{url:?}: {p:?} is not a port"))?,
            ),
            None => (hostport, 80),
        };
        if host.is_empty() || path.contains([' ', '\r', '\n']) {
            return Err(format!(
                "{url:?} is not a URL like \"http://127.0.0.1:9200/_cluster/health\""
            ));
        }
        Ok(HttpUrl {
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}:{}{}", self.host, self.port, self.path)
    }
}

impl serde::Serialize for HttpUrl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl crate::config::table::Shown for HttpUrl {
    fn shown(&self) -> String {
        format!("{:?}", self.to_string())
    }
}
