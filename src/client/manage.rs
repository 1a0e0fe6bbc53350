//! Repository management and discovery: tag listing (following `Link` pages), the OCI 1.1
//! referrers of a manifest, and deletes.

use http::{Method, StatusCode};
use url::Url;

use super::{status_error, ClientError, Exchange, Meter, OpCtx, RegistryClient, MANIFEST_LIMIT};
use crate::auth::AccessScope;
use crate::digest::Digest;
use crate::metrics::{ErrorKind, Event, Op};
use crate::net::transport::{HttpRequest, ReqUrl};
use crate::oci::headers::parse_link_next;
use crate::oci::manifest::{Descriptor, OCI_INDEX};
use crate::oci::reference::{Reference, Repository};

impl RegistryClient {
    /// `GET /v2/<repo>/tags/list`, following `Link: rel="next"` pages (each page is one
    /// `tag_list` sample). `page_size` sets `n`. A registry that sends a full page without
    /// a `Link` to the next (go-containerregistry's) is asked on with `last=`, and the
    /// deviation counted (`tag_list_no_link`), so that no tag is silently missed.
    pub async fn tag_list(
        &self,
        repo: &Repository,
        page_size: Option<u32>,
        ctx: OpCtx,
    ) -> Result<Vec<String>, ClientError> {
        #[derive(serde::Deserialize)]
        struct Page {
            #[serde(default)]
            tags: Option<Vec<String>>,
        }
        const MAX_PAGES: usize = 100_000;
        let mut url = self.url(&["/v2/", repo.as_str(), "/tags/list"]);
        if let Some(n) = page_size {
            url.query_pairs_mut().append_pair("n", &n.to_string());
        }
        let mut tags = Vec::new();
        for _ in 0..MAX_PAGES {
            let mut m = self.meter(Op::TagList, ctx.clone());
            let r = async {
                let request = HttpRequest::new(Method::GET, url.clone());
                let ex = self.exchange(request, &self.read_scope(repo), true).await?;
                m.exchanged(&ex);
                let (page, next): (Page, _) =
                    read_page(ex, &url, &mut m, "tag list is not valid JSON").await?;
                Ok((page.tags.unwrap_or_default(), next))
            }
            .await;
            let (page, next) = self.finish(&mut m, r).await?;
            // Exactly `n`: a registry that ignores `n` sends more, and is done.
            let full = page_size.is_some_and(|n| n > 0 && page.len() as u64 == u64::from(n));
            let last = page.last().cloned();
            // A registry that ignores `last` too would send the same page again.
            let repeated = last.is_some() && tags.last() == last.as_ref();
            if repeated {
                return Ok(tags);
            }
            tags.extend(page);
            match (next, full, last) {
                (Some(n), _, _) => url = n,
                (None, true, Some(last)) if !repeated => {
                    self.inner.recorder.event(Event::TagListNoLink).await;
                    url.query_pairs_mut()
                        .clear()
                        .append_pair("n", &page_size.unwrap_or_default().to_string())
                        .append_pair("last", &last);
                }
                _ => return Ok(tags),
            }
        }
        Err(ClientError::Protocol(format!(
            "tag list did not end after {MAX_PAGES} pages"
        )))
    }

    /// `GET /v2/<repo>/referrers/<digest>`: the manifests that name `digest` as their
    /// `subject` (an OCI image index of descriptors), following `Link` pages. `None` when
    /// the registry has no referrers API (404; counted as `referrers_unsupported`, not as an
    /// error).
    pub async fn referrers(
        &self,
        repo: &Repository,
        digest: &Digest,
        ctx: OpCtx,
    ) -> Result<Option<Vec<Descriptor>>, ClientError> {
        #[derive(serde::Deserialize)]
        struct Index {
            #[serde(default)]
            manifests: Vec<Descriptor>,
        }
        const MAX_PAGES: usize = 10_000;
        let mut url = self.url(&["/v2/", repo.as_str(), "/referrers/", digest.as_str()]);
        let mut found = Vec::new();
        for _ in 0..MAX_PAGES {
            let mut m = self.meter(Op::Referrers, ctx.clone());
            let r = async {
                let mut request = HttpRequest::new(Method::GET, url.clone());
                request.headers.insert(
                    http::header::ACCEPT,
                    http::HeaderValue::from_static(OCI_INDEX),
                );
                let ex = self.exchange(request, &self.read_scope(repo), true).await?;
                m.exchanged(&ex);
                if ex.response.status == StatusCode::NOT_FOUND {
                    let _ = ex.response.drain().await;
                    return Ok(None);
                }
                let (index, next): (Index, _) =
                    read_page(ex, &url, &mut m, "referrers answer is not an index").await?;
                Ok(Some((index.manifests, next)))
            }
            .await;
            match self.finish(&mut m, r).await? {
                None => {
                    self.inner.recorder.event(Event::ReferrersUnsupported).await;
                    return Ok(None);
                }
                Some((page, next)) => {
                    found.extend(page);
                    match next {
                        Some(n) => url = n,
                        None => return Ok(Some(found)),
                    }
                }
            }
        }
        Err(ClientError::Protocol(format!(
            "referrers did not end after {MAX_PAGES} pages"
        )))
    }

    /// `DELETE /v2/<repo>/manifests/<digest>`.
    pub async fn manifest_delete(
        &self,
        repo: &Repository,
        digest: &Digest,
        ctx: OpCtx,
    ) -> Result<(), ClientError> {
        let url = self.manifest_url(repo, &Reference::Digest(digest.clone()));
        self.delete(Op::ManifestDelete, repo, url, ctx).await
    }

    /// `DELETE /v2/<repo>/blobs/<digest>`.
    pub async fn blob_delete(
        &self,
        repo: &Repository,
        digest: &Digest,
        ctx: OpCtx,
    ) -> Result<(), ClientError> {
        let url = self.blob_url(repo, digest);
        self.delete(Op::BlobDelete, repo, url, ctx).await
    }

    async fn delete(
        &self,
        op: Op,
        repo: &Repository,
        url: ReqUrl,
        ctx: OpCtx,
    ) -> Result<(), ClientError> {
        let mut m = self.meter(op, ctx);
        let r = async {
            let request = HttpRequest::new(Method::DELETE, url);
            let scope = AccessScope::delete(repo);
            let ex = self.exchange(request, &scope, false).await?;
            m.exchanged(&ex);
            if !matches!(ex.response.status.as_u16(), 200 | 202 | 204) {
                return Err(status_error(ex).await);
            }
            let _ = ex.response.drain().await;
            Ok(())
        }
        .await;
        self.finish(&mut m, r).await
    }
}

/// One page of a paginated listing (tags, referrers): its JSON body, bounded, parsed as
/// `T`, and the next page's URL from its `Link` header; `what` names a body that does not
/// parse. Anything but 200 is the registry's error.
async fn read_page<T: serde::de::DeserializeOwned>(
    ex: Exchange,
    url: &Url,
    m: &mut Meter<'_>,
    what: &str,
) -> Result<(T, Option<Url>), ClientError> {
    if ex.response.status != StatusCode::OK {
        return Err(status_error(ex).await);
    }
    let next = ex
        .response
        .header("link")
        .and_then(|l| parse_link_next(l, url));
    let body = ex.response.bytes_limited(MANIFEST_LIMIT).await?;
    m.bytes_received = body.len() as u64;
    let page = serde_json::from_slice(&body).map_err(|e| ClientError::Unexpected {
        kind: ErrorKind::NotJson,
        message: format!("{what}: {e}"),
    })?;
    Ok((page, next))
}

#[cfg(test)]
mod tests {
    //! Paginated tags, which distribution 2.8 does not paginate on demand, on the scripted
    //! transport.

    use super::super::test_support::{client, repo};
    use super::*;
    use crate::net::scripted::{ScriptedResponse, ScriptedTransport};

    #[tokio::test]
    async fn tag_list_follows_link_pages() {
        let t = ScriptedTransport::new(|r| match r.url.query() {
            Some("n=2") => ScriptedResponse::status(200)
                .header("link", r#"</v2/a/b/tags/list?n=2&last=b>; rel="next""#)
                .body(r#"{"name":"a/b","tags":["a","b"]}"#),
            Some("n=2&last=b") => ScriptedResponse::status(200)
                .header(
                    "link",
                    r#"<http://registry.test/v2/a/b/tags/list?n=2&last=d>; rel="next""#,
                )
                .body(r#"{"name":"a/b","tags":["c","d"]}"#),
            _ => ScriptedResponse::status(200).body(r#"{"name":"a/b","tags":["e"]}"#),
        });
        let (c, handle) = client(t.clone());
        let tags = c
            .tag_list(&repo(), Some(2), OpCtx::default())
            .await
            .unwrap();
        assert_eq!(tags, ["a", "b", "c", "d", "e"]);
        drop(c);
        assert_eq!(
            handle
                .finish()
                .await
                .table()
                .op_total(Op::TagList)
                .unwrap()
                .ok,
            3
        );
    }

    /// go-containerregistry's registry sends a full page and no `Link`; distribution 2.8
    /// ignores `n` (tests/it/compat.rs meets both for real). The rest is asked for with
    /// `last=`, counted; a page longer than `n`, or one repeated, ends the list.
    #[tokio::test]
    async fn full_pages_without_link_are_followed_with_last() {
        use crate::metrics::Event;
        let tags = ["a", "b", "c", "d", "e"];
        let t = ScriptedTransport::new(move |r| {
            let query: std::collections::HashMap<String, String> =
                r.url.query_pairs().into_owned().collect();
            let n: usize = query["n"].parse().unwrap();
            let from = query
                .get("last")
                .map_or(0, |l| tags.iter().position(|t| t == l).unwrap() + 1);
            let page: Vec<&str> = tags.iter().copied().skip(from).take(n).collect();
            ScriptedResponse::status(200)
                .body(serde_json::json!({"name": "a/b", "tags": page}).to_string())
        });
        let (c, handle) = client(t.clone());
        let listed = c
            .tag_list(&repo(), Some(2), OpCtx::default())
            .await
            .unwrap();
        assert_eq!(listed, tags);
        drop(c);
        let agg = handle.finish().await;
        assert_eq!(agg.event(Event::TagListNoLink), 2);

        // A registry that ignores `n` and `last`: one page, nothing twice.
        let t = ScriptedTransport::new(move |_| {
            ScriptedResponse::status(200).body(r#"{"name":"a/b","tags":["x","y"]}"#)
        });
        let (c, _h) = client(t.clone());
        let listed = c
            .tag_list(&repo(), Some(2), OpCtx::default())
            .await
            .unwrap();
        assert_eq!(listed, ["x", "y"]);
        assert_eq!(
            t.requests().len(),
            2,
            "asked on once, saw the same page, stopped"
        );
    }
}
