//! Repository management: tag listing (following `Link` pages) and deletes.

use http::{Method, StatusCode};
use url::Url;

use super::{status_error, ClientError, Meter, OpCtx, RegistryClient, MANIFEST_LIMIT};
use crate::auth::AccessScope;
use crate::digest::Digest;
use crate::metrics::Op;
use crate::net::transport::HttpRequest;
use crate::oci::headers::parse_link_next;
use crate::oci::reference::{Reference, Repository};

impl RegistryClient {
    /// `GET /v2/<repo>/tags/list`, following `Link: rel="next"` pages (each page is one
    /// `tag_list` sample). `page_size` sets `n`.
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
            let mut m = Meter::new(Op::TagList, ctx);
            let r = async {
                let request = HttpRequest::new(Method::GET, url.clone());
                let ex = self.exchange(request, &self.read_scope(repo), true).await?;
                m.exchanged(&ex);
                if ex.response.status != StatusCode::OK {
                    return Err(status_error(ex).await);
                }
                let next = ex
                    .response
                    .header("link")
                    .and_then(|l| parse_link_next(l, &url));
                let body = ex.response.bytes_limited(MANIFEST_LIMIT).await?;
                m.bytes_received = body.len() as u64;
                let page: Page = serde_json::from_slice(&body).map_err(|e| {
                    ClientError::Protocol(format!("tag list is not valid JSON: {e}"))
                })?;
                Ok((page.tags.unwrap_or_default(), next))
            }
            .await;
            let (page, next) = self.finish(&m, r).await?;
            tags.extend(page);
            match next {
                Some(n) => url = n,
                None => return Ok(tags),
            }
        }
        Err(ClientError::Protocol(format!(
            "tag list did not end after {MAX_PAGES} pages"
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
        url: Url,
        ctx: OpCtx,
    ) -> Result<(), ClientError> {
        let mut m = Meter::new(op, ctx);
        let r = async {
            let request = HttpRequest::new(Method::DELETE, url);
            let mut scope = AccessScope::push(repo);
            scope.push = true;
            let ex = self.exchange(request, &scope, false).await?;
            m.exchanged(&ex);
            if !matches!(ex.response.status.as_u16(), 200 | 202 | 204) {
                return Err(status_error(ex).await);
            }
            let _ = ex.response.drain().await;
            Ok(())
        }
        .await;
        self.finish(&m, r).await
    }
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
                .table
                .op_total(Op::TagList)
                .unwrap()
                .ok,
            3
        );
    }
}
